"""The program evalpipe's sandbox runs to score BFCL completions (sent by
evalpipe/tasks/bfcl/checking.py; never imported by evalpipe): BFCL's own per-entry evaluation,
as `bfcl evaluate` runs it (`_evaluate_single_ast_entry`, `_evaluate_single_relevance_entry`),
with the prompting handler's decoder, which `eval`s parts of the model's text: hence here.

stdin: {"path": the runner's import paths, "bfcl": bfcl-eval's folder, "model": the
registered model name the checker reads, "items": [{category, id, function, ground_truth,
texts}]}. stdout's last line: per item, per text, {"valid": bool, "error_type": str or null}.
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
    from bfcl_eval.constants.enums import Language, ReturnFormat
    from bfcl_eval.eval_checker.eval_runner import (
        _evaluate_single_ast_entry,
        _evaluate_single_relevance_entry,
    )
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler
    from bfcl_eval.utils import is_java, is_js, is_relevance_or_irrelevance

    model = given["model"]
    handler = QuickTestingOSSHandler(
        model_name=model, temperature=0.001, registry_name=model, is_fc_model=False
    )
    out = []
    for item in given["items"]:
        category, entry = item["category"], {"id": item["id"], "function": item["function"]}
        if is_java(category):
            language, form = Language.JAVA, ReturnFormat.JAVA
        elif is_js(category):
            language, form = Language.JAVASCRIPT, ReturnFormat.JAVASCRIPT
        else:
            language, form = Language.PYTHON, ReturnFormat.PYTHON
        checked = []
        for text in item["texts"]:
            if is_relevance_or_irrelevance(category):
                found = _evaluate_single_relevance_entry(
                    handler, item["id"], text, entry, model, category
                )
            else:
                found = _evaluate_single_ast_entry(
                    handler,
                    item["id"],
                    text,
                    item["ground_truth"],
                    entry,
                    model,
                    category,
                    language=language,
                    return_format=form,
                    has_tool_call_tag=False,
                )
            checked.append({"valid": bool(found["valid"]), "error_type": found.get("error_type")})
        out.append(checked)
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
