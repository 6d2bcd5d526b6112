"""The program evalpipe runs in a child process to read BFCL's single-turn entries (sent by
evalpipe/tasks/bfcl/entries.py; never imported by evalpipe): bfcl-eval's own loading and its
handlers' own pre-processing and prompt formatting, over the package's data alone (no model
text), so a plain child process, not the sandbox.

stdin: {"path": bfcl-eval's folder, "categories": [...], "mode": "prompting" | "handler" |
"native", "model": the registered model (handler mode), "checker": the registered model
the checker is told}. stdout's last line: {"known": the
package's single-turn categories, "handler": the handler's class name, "entries": {category:
[{id, prompt, tools, function, ground_truth}]}, "config": the settings of the model the
checker is told, `checker` (config_of), "skipped": the categories left out}, or
{"refused": why} for a model BFCL does not register or whose handler is not a local one.
`format_sensitivity` (BFCL's 26 prompt formats over 200 entries, each format named in the
entry's id, which the handler's pre-processing reads) is left out for an FC handler or native
mode, as `bfcl generate` skips it for FC models. Per mode, from the entry as `bfcl generate` loads
it (language hints in the function docs):
- prompting: `prompt` the chat BFCL's generic OSS handler (QuickTestingOSSHandler) formats with
  the model's chat template;
- handler: `prompt` the text the registered model's handler formats itself (`_format_prompt`),
  as `bfcl generate` sends it to /v1/completions;
- native: `prompt` the entry's question and `tools` its functions as OpenAI tools, as BFCL's
  OpenAI FC handler compiles them (`convert_to_tool`: dots in names become underscores).
`function` the docs as `bfcl evaluate` loads them for the checker (no hints); `ground_truth`
the possible answers (None for the relevance categories).
"""

import json
import sys


def handler_for(mode, model):
    """The handler whose pre-processing and format the mode uses; a str says why none."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
    from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler

    if mode != "handler":
        return QuickTestingOSSHandler(
            model_name="evalpipe", temperature=0.001, registry_name="evalpipe", is_fc_model=False
        )
    config = MODEL_CONFIG_MAPPING.get(model)
    if config is None:
        return f"BFCL registers no model {model!r}"
    if not issubclass(config.model_handler, OSSHandler):
        return (
            f"BFCL's model {model!r} is served by {config.model_handler.__name__}, an API "
            "handler, not a local one that formats its own prompts"
        )
    handler = config.model_handler(
        model_name=config.model_name,
        temperature=0.001,
        registry_name=model,
        is_fc_model=config.is_fc_model,
    )
    # These handlers ask vLLM for stop tokens or special tokens evalpipe does not send yet.
    extra = [a for a in ("stop_token_ids", "skip_special_tokens") if hasattr(handler, a)]
    if extra:
        return (
            f"BFCL's handler for {model!r} ({type(handler).__name__}) sends "
            f"{', '.join(extra)} with its requests, which evalpipe does not send yet"
        )
    try:
        handler._format_prompt([{"role": "user", "content": "probe"}], [])
    except AttributeError as exc:  # it reads the model's tokenizer (`self.tokenizer`)
        return (
            f"BFCL's handler for {model!r} ({type(handler).__name__}) formats its prompts with "
            f"the model's tokenizer, which evalpipe does not give it yet ({exc})"
        )
    return handler


def config_of(model):
    """The registered `model`'s settings, for the sandboxed programs: its handler's class (by
    module and name) and the settings BFCL's checker reads. With them those programs stand in
    for bfcl_eval.constants.model_config, which imports every model's handler (seconds in
    each process; here, once per run)."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

    config = MODEL_CONFIG_MAPPING[model]
    cls = config.model_handler
    return {"model": model, "module": cls.__module__, "name": cls.__name__,
            "model_name": config.model_name, "is_fc_model": config.is_fc_model,
            "underscore_to_dot": config.underscore_to_dot}  # fmt: skip


def native_tools(functions):
    """BFCL's function docs as chat tools, as its OpenAI FC handler compiles them
    (`_compile_tools`)."""
    from bfcl_eval.constants.enums import ModelStyle
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.model_handler.utils import convert_to_tool

    return convert_to_tool(functions, GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS)


def prompt_of(handler, mode, entry):
    """What evalpipe sends for one entry: (prompt, tools)."""
    if mode == "native":
        return entry["question"][0], native_tools(entry["function"])
    data = handler._pre_query_processing_prompting(entry)
    data = handler.add_first_turn_message_prompting(data, entry["question"][0])
    if mode == "prompting":
        return data["message"], []
    return handler._format_prompt(data["message"], data["function"]), []


def skipped_for(handler, mode, categories):
    """The categories left out: format_sensitivity for an FC handler or native mode, as
    `bfcl generate` skips it for FC models."""
    from bfcl_eval.constants.category_mapping import NON_SCORING_CATEGORY

    fc = mode == "native" or handler.is_fc_model
    return [c for c in categories if c in NON_SCORING_CATEGORY and fc]


def main():
    given = json.load(sys.stdin)
    sys.path.append(given["path"])
    from bfcl_eval.constants.category_mapping import NON_SCORING_CATEGORY, SINGLE_TURN_CATEGORY
    from bfcl_eval.utils import (
        is_relevance_or_irrelevance,
        load_dataset_entry,
        load_ground_truth_entry,
    )

    mode = given["mode"]
    handler = handler_for(mode, given.get("model"))
    if isinstance(handler, str):
        sys.stdout.write("\n" + json.dumps({"refused": handler}) + "\n")
        return
    known = SINGLE_TURN_CATEGORY + NON_SCORING_CATEGORY
    skipped = skipped_for(handler, mode, given["categories"])
    out = {}
    for category in given["categories"]:
        if category not in known or category in skipped:
            continue  # the caller names it as unknown, or as left out
        truths = {}
        if not is_relevance_or_irrelevance(category):
            # A format_sensitivity id is "format_sensitivity_N:FORMAT:ORIGINAL_ID"; its ground
            # truth is the original entry's.
            truths = {e["id"]: e["ground_truth"] for e in load_ground_truth_entry(category)}
        checked = load_dataset_entry(
            category, include_prereq=False, include_language_specific_hint=False
        )
        functions = {e["id"]: e["function"] for e in checked}
        rows = []
        for entry in load_dataset_entry(category):
            prompt, tools = prompt_of(handler, mode, entry)
            rows.append(
                {
                    "id": entry["id"],
                    "prompt": prompt,
                    "tools": tools,
                    "function": functions[entry["id"]],
                    "ground_truth": truths.get(entry["id"].rpartition(":")[2]),
                }
            )
        out[category] = rows
    found = {"known": known, "handler": type(handler).__name__,
             "config": config_of(given["checker"]), "entries": out, "skipped": skipped}  # fmt: skip
    sys.stdout.write("\n" + json.dumps(found) + "\n")


if __name__ == "__main__":
    main()
