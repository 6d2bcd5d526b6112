"""lm-eval's results JSON for finished lm-eval tasks, made by lm-eval's own aggregation code.

The per-document metrics in the sample records are lm-eval's `process_results` values; handed to
lm-eval's `_process_results` in document order they give its aggregates, stderrs and group
scores (mmlu's size-weighted mean) by construction.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DamagedFileError
from evalpipe.tasks.kindbase import FinishedScores
from evalpipe.tasks.lmeval.task import LmEvalTask

# What lm-eval's CLI uses unless told otherwise (--bootstrap_iters).
BOOTSTRAP_ITERS = 100000
NO_POOL = "DISABLE_MULTIPROC"  # lm-eval's switch to bootstrap in this process

# The keys lm-eval's own results file has (lm_eval/result_schema.py, EvalResults), always.
KEYS = ("results", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better",
        "n-samples")  # fmt: skip


def lm_eval_results(
    tasks: Sequence[LmEvalTask],
    scores: FinishedScores,
    *,
    bootstrap_iters: int = BOOTSTRAP_ITERS,
) -> dict[str, Any]:
    """lm-eval's results (results, groups, group_subtasks, configs, versions, n-shot,
    higher_is_better, n-samples) for `tasks` from their documents' `scores`, JSON-ready.
    Groups appear when all their tasks are among `tasks`."""
    import lm_eval
    from lm_eval.evaluator_utils import _process_results
    from lm_eval.utils import handle_non_serializable

    accumulated: dict[str, Any] = {}
    for task in tasks:
        raw: dict[tuple[str, str], list[float]] = defaultdict(list)
        for _, found in sorted(scores.get(task.name, ()), key=lambda item: int(item[0])):
            for key, value in found.items():
                metric, _, filter_key = key.rpartition(",")
                raw[(metric, filter_key)].append(value)
        accumulated[task.name] = {"task": task.lm_task, "raw_metrics": raw, "logged_samples": []}
    names = set(accumulated)
    groups = {
        name: group
        for task in tasks
        for name, group in task.groups.items()
        if {t.task_name for t in group.get_all_tasks()} <= names
    }
    # lm-eval bootstraps some stderrs (perplexity, f1, …) in a forked process pool; forked from
    # the runner's threads its workers can hang for good. Its single-process path draws the
    # same seeded chunks, so the numbers are the same.
    saved = os.environ.get(NO_POOL)
    os.environ[NO_POOL] = "1"
    try:
        results = _process_results(accumulated, groups, bootstrap_iters)._to_eval_results()
    finally:
        if saved is None:
            del os.environ[NO_POOL]
        else:
            os.environ[NO_POOL] = saved
    results["lm_eval_version"] = lm_eval.__version__
    # Scores of a reasoning model's final answers, not of its whole completions: said so.
    separated = {t.name: t.reasoning_parser for t in tasks if t.reasoning_parser is not None}
    if separated:
        results["evalpipe_reasoning_separated"] = separated
    return json.loads(json.dumps(results, default=handle_non_serializable))


def check_results(path: Path, results: Mapping[str, Any]) -> None:
    """DamagedFileError when `results` (read from `path`) lacks a key lm-eval's readers expect."""
    missing = [key for key in KEYS if key not in results]
    if missing:
        raise DamagedFileError(
            f"{path} lacks lm-eval's key(s) {', '.join(missing)}; rerun "
            "`evalpipe run --resume` on the directory to write it again."
        )


def given(results: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The tasks and groups a run was given (those in no group of the run), and the folders of
    its task files, from its lm-eval results."""
    groups: Mapping[str, list[str]] = results.get("group_subtasks", {})
    inside = {name for members in groups.values() for name in members}
    names = [name for name in [*groups, *results["configs"]] if name not in inside]
    sources = (config.get("metadata", {}).get("config_source") for config in
               results["configs"].values())  # fmt: skip
    folders = sorted({str(Path(s).parent) for s in sources if s and Path(s).is_file()})
    return names, folders
