"""The program evalpipe runs in a child process to count BFCL's entries of categories a run did
not run (sent by evalpipe/tasks/bfcl/counts.py; never imported by evalpipe): the count BFCL's
overall gives such a category (`eval_runner_helper.get_category_score`), over the package's data
alone, so a plain child process, not the sandbox.

stdin: {"path": bfcl-eval's folder, "categories": [...]}. stdout's last line: {category: count}.
"""

import json
import sys


def main():
    given = json.load(sys.stdin)
    sys.path.append(given["path"])
    from bfcl_eval.utils import load_dataset_entry

    counts = {
        category: len(
            load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
        )
        for category in given["categories"]
    }
    sys.stdout.write("\n" + json.dumps(counts) + "\n")


if __name__ == "__main__":
    main()
