"""The program evalpipe runs in a child process to read BFCL's multi-turn entries (sent by
evalpipe/tasks/bfcl/entries.py; never imported by evalpipe): bfcl-eval's own loading and its
prompting handler's own pre-processing, over the package's data alone (no model text), so a
plain child process, not the sandbox.

stdin: {"path": bfcl-eval's folder, "categories": [...]}. stdout's last line: {"known": the
package's multi-turn categories, "entries": {category: [{id, turns, initial_config,
involved_classes, ground_truth, step_limit}]}}: `turns` the user messages of each turn as
`inference_multi_turn_prompting` adds them with BFCL's generic OSS handler
(QuickTestingOSSHandler): turn 0 after its system prompt listing the functions, a held-out
turn (miss_func) as the message offering the held-out functions; `step_limit` the steps per
turn after which the handler forces the entry to quit (MAXIMUM_STEP_LIMIT).
"""

import json
import sys


def main():
    given = json.load(sys.stdin)
    sys.path.append(given["path"])
    from bfcl_eval.constants.category_mapping import MULTI_TURN_CATEGORY
    from bfcl_eval.constants.default_prompts import (
        DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING,
        MAXIMUM_STEP_LIMIT,
    )
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    handler = QuickTestingOSSHandler(
        model_name="evalpipe", temperature=0.001, registry_name="evalpipe", is_fc_model=False
    )
    out = {}
    for category in given["categories"]:
        if category not in MULTI_TURN_CATEGORY:
            continue  # the caller names it as unknown
        truths = {e["id"]: e["ground_truth"] for e in load_ground_truth_entry(category)}
        rows = []
        for entry in load_dataset_entry(category):
            handler._pre_query_processing_prompting(entry)  # the system prompt, into turn 0
            holdout = entry.get("missed_function", {})
            turns = [
                [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING
                  .format(functions=holdout[str(i)])}] if str(i) in holdout else messages
                for i, messages in enumerate(entry["question"])
            ]  # fmt: skip
            rows.append(
                {
                    "id": entry["id"],
                    "turns": turns,
                    "initial_config": entry.get("initial_config", {}),
                    "involved_classes": entry["involved_classes"],
                    "ground_truth": truths[entry["id"]],
                    "step_limit": MAXIMUM_STEP_LIMIT,
                }
            )
        out[category] = rows
    sys.stdout.write("\n" + json.dumps({"known": MULTI_TURN_CATEGORY, "entries": out}) + "\n")


if __name__ == "__main__":
    main()
