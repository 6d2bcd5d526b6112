"""The task kinds' own results files, written when a run or a merge of shards completes: each
kind present makes its document (evalpipe/tasks/kinds.py), evalpipe/rundir/kindresults.py owns
the file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.rundir.kindresults import read_kind_results, write_kind_results
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.tasks.base import Task
from evalpipe.tasks.kindbase import FinishedScores
from evalpipe.tasks.kinds import kind_results, loadable, merged_kind_results


def write_run_results(
    files: RunDir, tasks: Sequence[Task], records: Sequence[SampleRecord]
) -> None:
    """Write the results file of every kind among `tasks` that keeps one."""
    for kind, document in kind_results(tasks, _scores(records)).items():
        write_kind_results(files, kind, document)


def write_merged_results(
    files: RunDir, shards: Sequence[RunDir], records: Sequence[SampleRecord]
) -> None:
    """Write the merged run's results file of every kind whose shards kept one, from the shards'
    files and `records`, every shard's samples."""
    found: dict[str, dict[Path, dict[str, Any]]] = {}
    for kind in loadable():
        for shard in shards:
            document = read_kind_results(shard, kind)
            if document is not None:
                found.setdefault(kind, {})[shard.kind_results(kind)] = document
    for kind, document in merged_kind_results(found, _scores(records)).items():
        write_kind_results(files, kind, document)


def _scores(records: Sequence[SampleRecord]) -> FinishedScores:
    """Each task's finished samples' ids and scores, in the records' order."""
    scores: dict[str, list[tuple[str, dict[str, float]]]] = {}
    for record in records:
        scores.setdefault(record.task, []).append((record.sample_id, record.scores))
    return scores
