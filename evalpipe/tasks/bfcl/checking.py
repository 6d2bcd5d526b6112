"""BFCL's checker over the model's completions, in evalpipe's sandbox (no network, no inherited
environment, a private /tmp, resource limits; docs/sandbox.md): its decoder `eval`s parts of
the model's text, which must never happen in the runner. Only data crosses: the entries and
texts in, each text's verdict out (checker_program.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.sandbox.exchange import run_exchange
from evalpipe.tasks.bfcl.install import sandbox_data
from evalpipe.tasks.bfcl.modes import Mode

log = logging.getLogger(__name__)

PROGRAM = Path(__file__).with_name("checker_program.py")
START_S = 120.0  # importing bfcl-eval's every model handler on a loaded node; normally ~3 s
PER_TEXT_S = 5.0
# A completion whose scoring did not end cleanly (it killed or overran the checker's process).
SANDBOX_FAILED = "sandbox_failed"

Verdict = Mapping[str, Any]  # {"valid": bool, "error_type": str | None}


def check_in_sandbox(mode: Mode, items: Sequence[Mapping[str, Any]]) -> list[list[Verdict]]:
    """Per item ({category, id, function, ground_truth, texts}), per text, BFCL's verdict with
    the mode's decoder and its checker model's settings. A failed batch is checked again one
    item at a time, so one text that breaks the checker fails its own item only
    (as SANDBOX_FAILED)."""
    data = sandbox_data(mode=mode.name, model=mode.checker_model, config=dict(mode.config),
                        items=list(items))  # fmt: skip
    texts = sum(len(item["texts"]) for item in items)
    answer, result = run_exchange(PROGRAM.read_text(), data, timeout_s=START_S + PER_TEXT_S * texts)
    if answer is not None:
        return answer
    if len(items) > 1:
        return [found for item in items for found in check_in_sandbox(mode, [item])]
    log.warning(
        "BFCL %s: checking in the sandbox ended %s: %s; it scores 0 and is counted as %s",
        items[0]["id"], result.status, result.detail, SANDBOX_FAILED,
    )  # fmt: skip
    return [[{"valid": False, "error_type": SANDBOX_FAILED} for _ in items[0]["texts"]]]
