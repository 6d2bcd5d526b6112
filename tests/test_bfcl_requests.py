"""Same prompts as BFCL: for every entry of four single-turn categories, the token ids evalpipe
sends equal those of the prompt BFCL's generic OSS handler formats (`_format_prompt`, after its
own pre-processing), tokenised as vLLM's /v1/completions tokenises the text BFCL sends it
(special tokens added), with tiny_random's tokenizer. BFCL's side runs in a child process with
bfcl-eval on its path, as evalpipe's own loading does; `bfcl_token_ids` also serves a
registered model's handler (tests/test_bfcl_modes.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.engine import rendering
from evalpipe.tasks.bfcl.child import project_env
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.kindbase import LoadOptions

CATEGORIES = ("simple_python", "multiple", "irrelevance", "live_parallel")

# BFCL's path, `bfcl generate` with its QuickTestingOSSHandler or a registered model's handler
# (as its model_config registers it): `inference_single_turn_prompting` up to
# `_query_prompting`'s formatted prompt, the handler's tokenizer the model's.
BFCL_SIDE = textwrap.dedent("""
    import json, sys
    given = json.load(sys.stdin)
    sys.path.append(given["bfcl"])
    from transformers import AutoTokenizer
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import QuickTestingOSSHandler
    from bfcl_eval.utils import load_dataset_entry

    if given["registered"]:
        config = MODEL_CONFIG_MAPPING[given["registered"]]
        handler = config.model_handler(model_name=config.model_name, temperature=0.001,
                                       registry_name=given["registered"],
                                       is_fc_model=config.is_fc_model)
    else:
        handler = QuickTestingOSSHandler(model_name="m", temperature=0.001, registry_name="m",
                                         is_fc_model=False)
    handler.tokenizer = AutoTokenizer.from_pretrained(given["model"])
    out = {}
    for category in given["categories"]:
        for entry in load_dataset_entry(category):
            data = handler._pre_query_processing_prompting(entry)
            data = handler.add_first_turn_message_prompting(data, entry["question"][0])
            text = handler._format_prompt(data["message"], data["function"])
            out[entry["id"]] = handler.tokenizer(text).input_ids  # as /v1/completions
    print(json.dumps(out))
""")


def bfcl_token_ids(
    model: Path, categories: tuple[str, ...], registered: str | None = None
) -> dict[str, list[int]]:
    given = {"bfcl": str(bfcl_dir()), "model": str(model), "categories": list(categories),
             "registered": registered}  # fmt: skip
    with tempfile.TemporaryDirectory() as root:
        done = subprocess.run(
            [sys.executable, "-c", BFCL_SIDE], input=json.dumps(given), capture_output=True,
            text=True, env=project_env(root), check=True,
        )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


def test_token_ids_equal_bfcls_prompting_handler_on_every_entry(tiny_random_path: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_random_path))
    theirs = bfcl_token_ids(tiny_random_path, CATEGORIES)
    tasks = KIND.load(expand_refs([f"bfcl:{c}" for c in CATEGORIES]), LoadOptions()).tasks
    ours = {
        sample.id: rendering.render(tokenizer, sample.prompt, chat=True, preset="tiny_random")[1]
        for task in tasks
        for sample in task.samples()
    }
    assert len(ours) == len(theirs) == 856  # every entry: 400 + 200 + 240 + 16
    assert ours == theirs
