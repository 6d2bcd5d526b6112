"""The program evalpipe's sandbox runs to score BFCL completions (sent by
evalpipe/tasks/bfcl/checking.py; never imported by evalpipe): BFCL's own per-entry evaluation,
as `bfcl evaluate` runs it (`_evaluate_single_ast_entry`, `_evaluate_single_relevance_entry`,
`_evaluate_single_multi_turn_entry`, and for memory `_evaluate_single_agentic_entry`), with the
mode's handler's decoder, which may `eval` parts of the model's text, and the multi-turn
checker, which `eval`s its calls: hence here.

stdin: {"path": the runner's import paths, "bfcl": bfcl-eval's folder, "mode": "prompting" |
"handler" | "native", "model": the registered model the checker is told, "config": its
settings (entries_program.config_of; without them the package's own model_config is imported),
"items": [{category, id, function, ground_truth, texts}]}; a multi-turn item has
initial_config and involved_classes instead of function, and each of its texts is a trajectory
(per turn, per step, the model's text) or, for an entry whose inference failed, a string; a
memory item's likewise (its ground_truth the answers one of which its last message must hold).
Per mode, a single-turn text is
- prompting: the completion, decoded by the generic OSS handler (QuickTestingOSSHandler);
- handler: the completion, read by the registered model's handler as `bfcl generate` reads
  its response (`_parse_query_response_prompting`, which drops a reasoning block) and decoded
  by it, as `bfcl evaluate` decodes with the model's registered handler;
- native: the JSON of BFCL's FC result, as its OpenAI FC handler records a response (the calls
  as [{name: arguments JSON}], or the answer's text when it made none), decoded by the checker
  model's registered FC handler.
A format_sensitivity text is decoded in the return format its id names (and its tool-call
tag), as `bfcl evaluate`'s format_sensitivity_runner decodes it.
stdout's last line: per item, per text, {"valid": bool, "error_type": str or null}.
"""

import importlib
import json
import os
import sys
import tempfile
import types
from types import SimpleNamespace


def handler_for(mode, model):
    """The handler whose decoder reads the texts, and how a text becomes BFCL's result."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
    from bfcl_eval.eval_checker.eval_runner import get_handler
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler

    if mode == "native":
        # Its decoder only: its constructor opens an API client, which scoring never uses.
        cls = MODEL_CONFIG_MAPPING[model].model_handler
        handler = cls.__new__(cls)
        handler.is_fc_model = True
        return handler, json.loads
    if mode == "handler":
        handler = get_handler(model)
    else:
        handler = QuickTestingOSSHandler(
            model_name=model, temperature=0.001, registry_name=model, is_fc_model=False
        )
    usage = SimpleNamespace(prompt_tokens=0, completion_tokens=0)

    def result(text):  # what `bfcl generate` records of a /v1/completions response
        response = SimpleNamespace(choices=[SimpleNamespace(text=text)], usage=usage)
        return handler._parse_query_response_prompting(response)["model_responses"]

    return handler, result


def stand_in(config):
    """bfcl_eval.constants.model_config with the checker model's entry alone (`config`, from
    entries_program.config_of): the real module imports every model's handler, seconds in each
    process, and the checker reads this model's settings only (`underscore_to_dot`; its
    handler class where the mode decodes with it)."""
    cls = getattr(importlib.import_module(config["module"]), config["name"])
    entry = SimpleNamespace(model_handler=cls, model_name=config["model_name"],
                            is_fc_model=config["is_fc_model"],
                            underscore_to_dot=config["underscore_to_dot"])  # fmt: skip
    module = types.ModuleType("bfcl_eval.constants.model_config")
    # ast_checker looks the model up with its underscores made slashes.
    module.MODEL_CONFIG_MAPPING = {config["model"]: entry,
                                   config["model"].replace("_", "/"): entry}  # fmt: skip
    sys.modules[module.__name__] = module


def main():
    given = json.load(sys.stdin)
    sys.path[:0] = given["path"]
    sys.path.append(given["bfcl"])
    os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp(prefix="bfcl-")  # the sandbox's /tmp
    if given.get("config"):
        stand_in(given["config"])
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker.eval_runner import (
        _evaluate_single_agentic_entry,
        _evaluate_single_ast_entry,
        _evaluate_single_multi_turn_entry,
        _evaluate_single_relevance_entry,
    )
    from bfcl_eval.model_handler.utils import parse_prompt_variation_params
    from bfcl_eval.utils import (
        is_agentic,
        is_format_sensitivity,
        is_java,
        is_js,
        is_multi_turn,
        is_relevance_or_irrelevance,
    )

    model = given["model"]
    handler, result = handler_for(given["mode"], model)
    out = []
    for item in given["items"]:
        category, entry = item["category"], {"id": item["id"], "function": item.get("function")}
        tagged = False
        if is_format_sensitivity(category):  # the id names the format asked for
            form, tagged = parse_prompt_variation_params(item["id"].split(":")[1])[:2]
            language, form = Language.PYTHON, ReturnFormat(form)
        elif is_java(category):
            language, form = Language.JAVA, ReturnFormat.JAVA
        elif is_js(category):
            language, form = Language.JAVASCRIPT, ReturnFormat.JAVASCRIPT
        else:
            language, form = Language.PYTHON, ReturnFormat.PYTHON
        checked = []
        for text in item["texts"]:
            if is_multi_turn(category):
                state = {k: item[k] for k in ("id", "initial_config", "involved_classes")}
                found = _evaluate_single_multi_turn_entry(
                    handler, item["id"], text, item["ground_truth"], state, model, category
                )
            elif is_agentic(category):
                found = _evaluate_single_agentic_entry(
                    handler,
                    item["id"],
                    text,
                    item["ground_truth"],
                    {"question": None},
                    model,
                    category,
                )
            elif is_relevance_or_irrelevance(category):
                found = _evaluate_single_relevance_entry(
                    handler, item["id"], result(text), entry, model, category
                )
            else:
                found = _evaluate_single_ast_entry(
                    handler,
                    item["id"],
                    result(text),
                    item["ground_truth"],
                    entry,
                    model,
                    category,
                    language=language,
                    return_format=form,
                    has_tool_call_tag=tagged,
                )
            # The multi-turn evaluation keeps its error type inside "error".
            error = found.get("error_type") or (found.get("error") or {}).get("error_type")
            checked.append({"valid": bool(found["valid"]), "error_type": error})
        out.append(checked)
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
