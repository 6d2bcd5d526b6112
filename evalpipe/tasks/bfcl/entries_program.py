"""The program evalpipe runs in a child process to read BFCL's single-turn entries (sent by
evalpipe/tasks/bfcl/entries.py; never imported by evalpipe): bfcl-eval's own loading and its
prompting handler's own pre-processing, over the package's data alone (no model text), so a
plain child process, not the sandbox.

stdin: {"path": bfcl-eval's folder, "categories": [...]}. stdout's last line: {"known": the
package's single-turn categories, "entries": {category: [{id, messages, function,
ground_truth}]}}: `messages` the chat BFCL's generic OSS handler (QuickTestingOSSHandler)
formats with the model's chat template, from the entry as `bfcl generate` loads it (language
hints in the function docs); `function` the docs as `bfcl evaluate` loads them for the checker
(no hints); `ground_truth` the possible answers (None for the relevance categories).
"""

import json
import sys


def main():
    given = json.load(sys.stdin)
    sys.path.append(given["path"])
    from bfcl_eval.constants.category_mapping import SINGLE_TURN_CATEGORY
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler
    from bfcl_eval.utils import (
        is_relevance_or_irrelevance,
        load_dataset_entry,
        load_ground_truth_entry,
    )

    handler = QuickTestingOSSHandler(
        model_name="evalpipe", temperature=0.001, registry_name="evalpipe", is_fc_model=False
    )
    out = {}
    for category in given["categories"]:
        if category not in SINGLE_TURN_CATEGORY:
            continue  # the caller names it as unknown
        truths = {}
        if not is_relevance_or_irrelevance(category):
            truths = {e["id"]: e["ground_truth"] for e in load_ground_truth_entry(category)}
        checked = load_dataset_entry(
            category, include_prereq=False, include_language_specific_hint=False
        )
        functions = {e["id"]: e["function"] for e in checked}
        rows = []
        for entry in load_dataset_entry(category):
            data = handler._pre_query_processing_prompting(entry)
            data = handler.add_first_turn_message_prompting(data, entry["question"][0])
            rows.append(
                {
                    "id": entry["id"],
                    "messages": data["message"],
                    "function": functions[entry["id"]],
                    "ground_truth": truths.get(entry["id"]),
                }
            )
        out[category] = rows
    sys.stdout.write("\n" + json.dumps({"known": SINGLE_TURN_CATEGORY, "entries": out}) + "\n")


if __name__ == "__main__":
    main()
