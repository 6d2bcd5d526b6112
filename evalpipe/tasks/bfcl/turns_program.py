"""The program evalpipe runs in a child process to read BFCL's multi-turn entries for estimates
(sent by evalpipe/tasks/bfcl/episode_requests.py; never imported by evalpipe): each entry's
turns as BFCL's generic OSS prompting handler sends them (the first with its system prompt
listing the functions; a turn that adds a held-out function, its docs) and the ground truth's
calls per turn, over the package's data alone, so a plain child process, not the sandbox.

stdin: {"path": bfcl-eval's folder, "categories": [...]}. stdout's last line: {category:
[{id, turns: [[message, ...], ...], calls: [[call, ...], ...]}]}.
"""

import json
import sys


def main():
    given = json.load(sys.stdin)
    sys.path.append(given["path"])
    # What the prompting handler's `_pre_query_processing_prompting` calls, without importing
    # every handler (seconds).
    from bfcl_eval.model_handler.utils import system_prompt_pre_processing_chat_model
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    out = {}
    for category in given["categories"]:
        truths = {e["id"]: e["ground_truth"] for e in load_ground_truth_entry(category)}
        rows = []
        for entry in load_dataset_entry(category):
            turns = entry["question"]
            turns[0] = system_prompt_pre_processing_chat_model(
                turns[0], entry["function"], entry["id"]
            )
            for index, functions in (entry.get("missed_function") or {}).items():
                docs = json.dumps(functions, indent=4)
                turns[int(index)] = [{"role": "user", "content": docs}]
            rows.append({"id": entry["id"], "turns": turns, "calls": truths[entry["id"]]})
        out[category] = rows
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
