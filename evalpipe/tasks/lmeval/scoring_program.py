"""The program evalpipe's sandbox runs to score an lm-eval task marked unsafe_code (sent by
evalpipe/tasks/lmeval/sandboxed.py; it is never imported by evalpipe): lm-eval's filters and
`process_results` over the documents and responses read from stdin, the filtered responses and
metrics written to stdout as one JSON line.

It starts as the sandbox's main program with the standard library alone; the runner's import
paths come with the data, the task pickled (its own modules' functions by value).
"""

import base64
import json
import os
import pickle
import sys


class Response:
    """What lm-eval's filters read and write of an Instance."""

    def __init__(self, doc, resps):
        self.doc, self.resps, self.filtered_resps = doc, resps, {}


def number(value):
    """A metric value JSON can carry (numpy scalars become floats; the rest is named)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return repr(value)


def main():
    given = json.load(sys.stdin)
    sys.path[:0] = given["path"]
    os.environ.update(given["environ"])
    task = pickle.loads(base64.b64decode(given["task"]))
    docs = [[Response(item["doc"], resps) for resps in item["responses"]] for item in given["docs"]]
    every = [response for responses in docs for response in responses]
    for ensemble in task._filters if every else ():  # none: a check that the task loads here
        ensemble.apply(every)
    out = []
    for item, responses in zip(given["docs"], docs, strict=True):
        metrics = {}
        for key in responses[0].filtered_resps:
            found = task.process_results(item["doc"], [r.filtered_resps[key] for r in responses])
            metrics[key] = {metric: number(value) for metric, value in found.items()}
        out.append({"filtered": [r.filtered_resps for r in responses], "metrics": metrics})
    sys.stdout.write("\n" + json.dumps(out, default=str) + "\n")


if __name__ == "__main__":  # as the sandbox runs it
    main()
