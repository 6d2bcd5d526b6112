"""The program evalpipe runs in a child process to read BFCL's multi-turn entries (sent by
evalpipe/tasks/bfcl/entries.py; never imported by evalpipe): bfcl-eval's own loading and its
handler's own pre-processing, over the package's data alone (no model text), so a plain child
process, not the sandbox.

stdin: {"path": bfcl-eval's folder, "categories": [...], "mode": "prompting" | "handler" |
"native", "model": the registered model (handler mode), "checker": the model the checker is
told}.
stdout's last line: {"known": the package's multi-turn categories, "handler": the handler's
class name, "config": the settings of the model the checker is told, `checker`
(entries_program.config_of), "unavailable": {category: why} (memory_vector when its simulated
API does not import: its packages or its encoder did not load), "entries": {category: [{id,
turns, initial_config, involved_classes, ground_truth, step_limit}]}} (or {"refused": why}, as
entries_program.py refuses a model): `turns` the user messages of each turn as BFCL's multi-turn
loop adds them: turn 0 after the handler's pre-processing (the generic OSS handler's system
prompt listing the functions, in prompting mode; none in native mode, as
`inference_multi_turn_FC`), a held-out turn (miss_func) as the message offering the held-out
functions (in native mode BFCL's words alone, the functions going to the tools); `step_limit`
the steps per turn after which the handler forces the entry to quit (MAXIMUM_STEP_LIMIT). In
handler mode each entry also has `functions` (the functions the handler formats into every
prompt), `chat` (the handler's messages after turn 0) and `prompt` (the text its
`_format_prompt` makes of them: the first request, as `bfcl generate` sends it). In native mode
each entry also has `tools` (its functions as chat tools, as BFCL's OpenAI FC handler compiles
them: entries_program.native_tools) and `added_tools` ({turn: the held-out functions as tools},
which BFCL adds to the entry's functions at that turn before compiling them again). A web
search category (web_search_base, web_search_no_snippet: the same questions) has the
initial_config `bfcl generate` gives it (`show_snippet`,
populate_initial_settings_for_web_search_test_cases). A memory
category (memory_kv, memory_vector, memory_rec_sum) holds its prerequisite conversations first
(`prereq`: true, BFCL's `memory_CATEGORY_prereq_*` ids), then its questions, each with BFCL's
`scenario` and `depends_on` (the prerequisites that must end before it starts); turn 0 carries
BFCL's memory instruction (`add_memory_instruction_system_prompt`) with the mark
`memory_content` where the memory's content goes once its prerequisites ended, and
`empty_memory` is what BFCL writes there when they left no snapshot; stdin's "memory_content" is
that mark.
"""

import json
import sys
from types import SimpleNamespace


def main():
    given = json.load(sys.stdin)
    sys.path.append(given["path"])
    from bfcl_eval.constants.category_mapping import MULTI_TURN_CATEGORY
    from bfcl_eval.constants.default_prompts import (
        DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
        DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING,
        MAXIMUM_STEP_LIMIT,
    )
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler
    from bfcl_eval.model_handler.utils import add_memory_instruction_system_prompt
    from bfcl_eval.utils import (
        extract_test_category_from_id,
        is_memory,
        is_memory_prereq,
        is_web_search,
        load_dataset_entry,
        load_ground_truth_entry,
        populate_initial_settings_for_web_search_test_cases,
    )
    from entries_program import config_of, native_tools  # its folder is first on its path

    mode = given.get("mode", "prompting")
    if mode == "handler":
        # The single-turn program's choice and refusals of a registered model's handler.
        from entries_program import handler_for

        handler = handler_for(mode, given["model"])
        if isinstance(handler, str):
            sys.stdout.write("\n" + json.dumps({"refused": handler}) + "\n")
            return
    else:
        handler = QuickTestingOSSHandler(
            model_name="evalpipe", temperature=0.001, registry_name="evalpipe", is_fc_model=False
        )
    out, unavailable = {}, {}
    for category in given["categories"]:
        if category not in (*MULTI_TURN_CATEGORY, *MEMORY, *WEB_SEARCH):
            continue  # the caller names it as unknown
        if category == "memory_vector":  # its module loads the encoder and imports faiss
            try:
                load_class(CLASS_FILE_PATH_MAPPING, "MemoryAPI_vector")
            except Exception as exc:
                unavailable[category] = f"{type(exc).__name__}: {exc}"
                continue
        # Memory and web search answers keep the file's ids ("memory_0-customer-0",
        # "web_search_0"); the entries, the category's.
        shared = "web_search" if is_web_search(category) else "memory"
        truths = {e["id"].replace(shared, category, 1): e["ground_truth"]
                  for e in load_ground_truth_entry(category)}  # fmt: skip
        entries = populate_initial_settings_for_web_search_test_cases(  # show_snippet
            load_dataset_entry(category))  # fmt: skip
        rows = []
        for entry in entries:
            memory = {}
            if is_memory(category):
                # inference_multi_turn_prompting's first step for a memory entry, before the
                # handler's: the instruction holding the memory that its prerequisites left.
                empty = load_class(CLASS_FILE_PATH_MAPPING, entry["involved_classes"][0])
                stub = SimpleNamespace(_dump_core_memory_to_context=lambda: given["memory_content"])
                entry["question"] = add_memory_instruction_system_prompt(
                    entry["question"], extract_test_category_from_id(entry["id"]),
                    entry["scenario"], stub,
                )  # fmt: skip
                memory = {"prereq": is_memory_prereq(entry["id"]), "scenario": entry["scenario"],
                          "depends_on": entry["depends_on"],
                          "empty_memory": empty._dump_core_memory_to_context()}  # fmt: skip
            holdout = entry.get("missed_function", {})
            if mode == "native":  # inference_multi_turn_FC: no system prompt, the tools apart
                offer = {i: DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC for i in holdout}
            else:
                data = handler._pre_query_processing_prompting(entry)  # system prompt, in turn 0
                offer = {i: DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
                    functions=functions) for i, functions in holdout.items()}  # fmt: skip
            turns = [
                [{"role": "user", "content": offer[str(i)]}] if str(i) in offer else messages
                for i, messages in enumerate(entry["question"])
            ]
            row = {
                "id": entry["id"],
                "turns": turns,
                "initial_config": entry.get("initial_config", {}),
                "involved_classes": entry["involved_classes"],
                "ground_truth": truths.get(entry["id"], []),  # a prerequisite has none
                "step_limit": MAXIMUM_STEP_LIMIT,
                **memory,
            }
            if mode == "native":
                row["tools"] = native_tools(entry["function"])
                row["added_tools"] = {i: native_tools(f) for i, f in holdout.items()}
            if mode == "handler":
                data = handler.add_first_turn_message_prompting(data, turns[0])
                row["functions"], row["chat"] = data["function"], data["message"]
                row["prompt"] = handler._format_prompt(data["message"], data["function"])
            rows.append(row)
        out[category] = rows
    found = {"known": [*MULTI_TURN_CATEGORY, *MEMORY, *WEB_SEARCH],
             "handler": type(handler).__name__, "entries": out,
             "unavailable": unavailable}  # fmt: skip
    found["config"] = config_of(given["checker"])
    sys.stdout.write("\n" + json.dumps(found) + "\n")


# BFCL's memory categories (memory_vector's encoder was found in the user's cache before this).
MEMORY = ("memory_kv", "memory_vector", "memory_rec_sum")
WEB_SEARCH = ("web_search_base", "web_search_no_snippet")  # initial_config: show_snippet


def load_class(paths, name):
    """A fresh instance of BFCL's simulated API class `name` (nothing loaded into it)."""
    import importlib

    return getattr(importlib.import_module(paths[name]), name)()


if __name__ == "__main__":
    main()
