"""lm_eval_results.json: lm-eval's results JSON for a run's `lm_eval:` tasks, so tools that read
lm-eval's output (its `results`, `groups`, `configs`, `versions`, `n-shot`, `higher_is_better`,
`n-samples` keys) read evalpipe's. Written when a run completes; the content is lm-eval's own
(evalpipe/tasks/lmeval/results.py), this module only owns the file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalpipe.core.errors import DamagedFileError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.results import read_json, write_json

# The keys lm-eval's own results file has (lm_eval/result_schema.py, EvalResults), always.
KEYS = ("results", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better",
        "n-samples")  # fmt: skip


def write_lm_eval_results(files: RunDir, results: Mapping[str, Any]) -> None:
    """Replace lm_eval_results.json atomically."""
    write_json(files.lm_eval_results, dict(results))


def read_lm_eval_results(files: RunDir) -> dict[str, Any] | None:
    """The run's lm-eval results; None when it ran no lm-eval task (or has not completed).
    DamagedFileError when a key lm-eval's readers expect is missing."""
    if not files.lm_eval_results.exists():
        return None
    data = read_json(files.lm_eval_results)
    missing = [key for key in KEYS if key not in data]
    if missing:
        raise DamagedFileError(
            f"{files.lm_eval_results} lacks lm-eval's key(s) {', '.join(missing)}; rerun "
            "`evalpipe run --resume` on the directory to write it again."
        )
    return data
