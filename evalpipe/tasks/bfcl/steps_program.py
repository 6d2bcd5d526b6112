"""The program evalpipe's sandbox runs to resolve steps of BFCL multi-turn entries (sent by
evalpipe/tasks/bfcl/multiturn.py; never imported by evalpipe): what
`inference_multi_turn_prompting` does with each completion. The prompting handler's decoder
(`decode_execute`, which is `default_decode_execute_prompting` for the OSS handlers; imported
alone, since importing the handler class costs a second a step) reads the text as calls, and
`execute_multi_turn_func_call` `eval`s them against BFCL's simulated APIs: hence here.

BFCL keeps each entry's API instances in its module's globals. This process is fresh, so it
first replays the entry's recorded calls, step by step, against new instances loaded from the
entry's `initial_config`: the state the recorded steps left, as BFCL's own process held it
(the APIs draw from random generators seeded by the scenario, and the results of the replayed
calls are compared with the recorded ones: `replay_equal`).

stdin: {"path": the runner's import paths, "bfcl": bfcl-eval's folder, "model": the name
BFCL keys instances by, "items": [{category, id, initial_config, involved_classes, replay:
[{calls, results}], text}]}. stdout's last line: per item, {"calls": the decoded calls ([]
when none), "results": their execution results, "decode_error": the decoder's error or null,
"replay_equal": bool}.
"""

import json
import os
import sys
import tempfile


def main():
    given = json.load(sys.stdin)
    sys.path[:0] = given["path"]
    sys.path.append(given["bfcl"])
    os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp(prefix="bfcl-")  # the sandbox's /tmp
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
        is_empty_execute_response,
    )
    from bfcl_eval.model_handler.utils import default_decode_execute_prompting

    out = []
    for item in given["items"]:

        def execute(calls, item=item):
            return execute_multi_turn_func_call(
                calls, item["initial_config"], item["involved_classes"], given["model"],
                item["id"], long_context="long_context" in item["category"], is_evaL_run=False,
            )[0]  # fmt: skip

        found = {"calls": [], "results": [], "decode_error": None, "replay_equal": True}
        try:
            calls = default_decode_execute_prompting(item["text"], has_tool_call_tag=False)
        except Exception as exc:  # BFCL: the turn ends
            found["decode_error"] = str(exc)
            calls = []
        if not is_empty_execute_response(calls):
            for step in item["replay"]:
                found["replay_equal"] &= execute(step["calls"]) == step["results"]
            found["calls"], found["results"] = calls, execute(calls)
        out.append(found)
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
