"""The run's lm-eval results record: the finished lm_eval: tasks' documents through lm-eval's
aggregation (evalpipe/tasks/lmeval/results.py) into lm_eval_results.json."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.lmeval import read_lm_eval_results, write_lm_eval_results
from evalpipe.rundir.results import SampleRecord
from evalpipe.tasks.base import Task
from evalpipe.tasks.lmeval import LmEvalTask, load_lmeval_tasks


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


def merge_results(files: RunDir, shards: Sequence[RunDir], records: Sequence[SampleRecord]) -> None:
    """lm_eval_results.json of a merged run: lm-eval's aggregation over every shard's documents
    (stderrs and group means of the whole, not averages of the shards' figures). The tasks are
    loaded again (their datasets too) from what the shards' results name: each task's file and
    the tasks and groups the run was given."""
    found = [results for results in map(read_lm_eval_results, shards) if results is not None]
    if not found:
        return
    names, folders = _given(found[0])
    separated = set(found[0].get("evalpipe_reasoning_separated", {}).values())
    tasks = load_lmeval_tasks(
        [*folders, *names],
        reasoning_parser=separated.pop() if separated else None,
    )
    write_results(files, tasks, records)


def _given(results: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The tasks and groups a run was given (those in no group of the run), and the folders of
    its task files, from its lm-eval results."""
    groups: Mapping[str, list[str]] = results.get("group_subtasks", {})
    inside = {name for members in groups.values() for name in members}
    names = [name for name in [*groups, *results["configs"]] if name not in inside]
    sources = (config.get("metadata", {}).get("config_source") for config in
               results["configs"].values())  # fmt: skip
    folders = sorted({str(Path(s).parent) for s in sources if s and Path(s).is_file()})
    return names, folders
