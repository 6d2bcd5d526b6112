"""Scoring of lm-eval tasks marked unsafe_code in evalpipe's sandbox: lm-eval's filters and
`process_results` run there (no network, no inherited environment, a private /tmp, resource
limits; docs/sandbox.md), never in the runner, whose environment holds tokens and keys.

The task crosses as a pickle with its documents left out (its own `!function` modules'
functions by value: lm-eval names those modules by their file path, which no import finds),
the documents and responses as JSON; the filtered responses and metrics come back as JSON.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.sandbox.exchange import run_exchange
from evalpipe.sandbox.pool import SandboxResult

log = logging.getLogger(__name__)

PROGRAM = Path(__file__).with_name("scoring_program.py")
# The task's documents and requests: the documents scored travel apart, as JSON.
DATA_ATTRIBUTES = ("dataset", "task_docs", "sampler", "_instances", "_training_docs",
                   "_fewshot_docs")  # fmt: skip
# Set inside only: code_eval (HF evaluate) executes programs only where this says it may, and
# the datasets lm-eval imports must not reach for the network.
INSIDE_ENV = {"HF_ALLOW_CODE_EVAL": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
START_S = 60.0  # importing lm-eval and unpickling the task on a loaded node; normally ~2 s
PER_DOCUMENT_S = 30.0  # a code metric runs a document's programs with timeouts of its own


def check_in_sandbox(lm_task: Any) -> None:
    """ConfigError unless the task loads in the sandbox (its modules imported there, with no
    network and no home folder): found as the run starts, not after generating."""
    answer, result = _exchange(lm_task, [])
    if answer is None:
        raise ConfigError(
            f"lm-eval task {lm_task.task_name!r} (unsafe_code) does not load in the sandbox "
            f"that would score it: {result.detail}. A metric that fetches code as its module "
            "is imported (HF evaluate's code_eval, as lm-eval's humaneval and mbpp load it) "
            "cannot work there: no network, no home folder. Its output ended:\n"
            f"{result.output_tail[-2000:]}"
        )


def score_in_sandbox(
    lm_task: Any, chunk: Sequence[tuple[Any, list[Any]]]
) -> list[dict | SandboxResult]:
    """Each (document, instances) of `chunk` filtered and scored by lm-eval in the sandbox:
    the instances' filtered_resps are filled in, and each document's metrics returned as
    {filter: {metric: value}}; for a document whose scoring did not end cleanly (the code it
    ran killed the metric's process, or overran), how it ended. A failed batch is scored again
    one document at a time, so one document's program fails that document only."""
    answer, result = _exchange(lm_task, chunk)
    if answer is None and len(chunk) > 1:
        return [found for one in chunk for found in score_in_sandbox(lm_task, [one])]
    if answer is None:
        log.warning(
            "lm-eval task %r (unsafe_code): scoring a document in the sandbox ended %s: %s; "
            "it scores 0 and is counted as sandbox_failed",
            lm_task.task_name,
            result.status,
            result.detail,
        )
        return [result]
    for (_, instances), scored in zip(chunk, answer, strict=True):
        for instance, filtered in zip(instances, scored["filtered"], strict=True):
            instance.filtered_resps = filtered
    return [scored["metrics"] for scored in answer]


def _exchange(
    lm_task: Any, chunk: Sequence[tuple[Any, list[Any]]]
) -> tuple[list[dict] | None, SandboxResult]:
    data = {
        "path": [p for p in sys.path if p and Path(p).is_dir()],
        "environ": INSIDE_ENV,
        "task": _pickled(lm_task),
        "docs": [
            {"doc": _json(lm_task, doc), "responses": [i.resps for i in instances]}
            for doc, instances in chunk
        ],
    }
    timeout_s = START_S + PER_DOCUMENT_S * len(chunk)
    return run_exchange(PROGRAM.read_text(), data, timeout_s=timeout_s)


@functools.cache  # once per task: the same task scores every chunk
def _pickled(lm_task: Any) -> str:
    import cloudpickle

    bare = copy.copy(lm_task)
    for name in DATA_ATTRIBUTES:
        if hasattr(bare, name):
            setattr(bare, name, None)
    by_path = [m for name, m in list(sys.modules.items()) if name.startswith("/")]
    for module in by_path:
        cloudpickle.register_pickle_by_value(module)
    try:
        return base64.b64encode(cloudpickle.dumps(bare)).decode()
    except Exception as exc:  # pickling reaches whatever the task's functions hold
        raise ConfigError(
            f"lm-eval task {lm_task.task_name!r} (unsafe_code) cannot be sent to the sandbox "
            f"to be scored: {type(exc).__name__}: {exc}. Run it with lm-eval itself."
        ) from None
    finally:
        for module in by_path:
            cloudpickle.unregister_pickle_by_value(module)


def _json(lm_task: Any, doc: Any) -> Any:
    """The document as JSON holds it, or ConfigError: only data crosses into the sandbox."""
    try:
        return json.loads(json.dumps(doc))
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"lm-eval task {lm_task.task_name!r} (unsafe_code): a document is not JSON "
            f"({exc}), so it cannot be scored in the sandbox. Run it with lm-eval itself."
        ) from None
