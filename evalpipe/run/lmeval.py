"""The run's lm-eval results record: the finished lm_eval: tasks' documents through lm-eval's
aggregation (evalpipe/tasks/lmeval/results.py) into lm_eval_results.json."""

from __future__ import annotations

from collections.abc import Sequence

from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.lmeval import write_lm_eval_results
from evalpipe.rundir.results import SampleRecord
from evalpipe.tasks.base import Task
from evalpipe.tasks.lmeval import LmEvalTask


def write_results(files: RunDir, tasks: Sequence[Task], records: Sequence[SampleRecord]) -> None:
    """Write lm_eval_results.json when the run has lm-eval tasks (lm_eval is loaded then)."""
    bridged = [task for task in tasks if isinstance(task, LmEvalTask)]
    if not bridged:
        return
    from evalpipe.tasks.lmeval.results import lm_eval_results

    names = {task.name for task in bridged}
    scores: dict[str, list[tuple[str, dict[str, float]]]] = {}
    for record in records:
        if record.task in names:
            scores.setdefault(record.task, []).append((record.sample_id, record.scores))
    write_lm_eval_results(files, lm_eval_results(bridged, scores))
