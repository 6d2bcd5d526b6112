"""The BFCL kind: `--tasks bfcl` (every category evalpipe runs: single-turn, then multi-turn)
or `bfcl:CATEGORY,...`, one task per category, prompting mode; a completed run keeps BFCL's
per-category accuracy, its groups and its overall as its results document (results.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import BFCL_CATEGORIES, BFCL_MULTI_TURN, TaskRef
from evalpipe.records.prompt import messages
from evalpipe.tasks.base import Task
from evalpipe.tasks.bfcl.entries import EPISODES, read_entries
from evalpipe.tasks.bfcl.install import bfcl_dir, bfcl_version
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.bfcl.results import results_document
from evalpipe.tasks.bfcl.task import CHECKER_MODEL, HANDLER, MODE, PREFIX, BfclTask
from evalpipe.tasks.kindbase import FinishedScores, Loaded, LoadOptions, TaskKind


class BfclKind(TaskKind):
    name = "bfcl"

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        bfcl_dir()  # missing: one message naming the install, before anything loads
        named = [ref.name for ref, _ in refs]
        chosen = [c for c in BFCL_CATEGORIES if self.name in named or c in named]
        version = bfcl_version()
        single = [c for c in chosen if c not in BFCL_MULTI_TURN]
        multi = [c for c in chosen if c in BFCL_MULTI_TURN]
        entries = {**(read_entries(single) if single else {}),
                   **(read_entries(multi, EPISODES) if multi else {})}  # fmt: skip
        return Loaded(tasks=tuple(
            (BfclMultiTurnTask if c in multi else BfclTask)(
                bfcl_category=c, version=version, entries=entries[c])
            for c in chosen))  # fmt: skip

    def ask(self, task: Task) -> Ask:
        # A multi-turn entry's first step (the prompt of its samples); its later steps, with
        # the history grown, are priced apart.
        assert isinstance(task, BfclTask | BfclMultiTurnTask)  # this kind loads only these
        longest = max((_chat_bytes(messages(s.prompt)) for s in task.samples()), default=None)
        return Ask(name=task.name, max_tokens=task.sampling.max_tokens, prompt_bytes=longest)

    def results(self, tasks: Sequence[Task], scores: FinishedScores) -> dict[str, Any] | None:
        names = [t.name for t in tasks if isinstance(t, BfclTask | BfclMultiTurnTask)]
        return accuracy_document(names, scores) if names else None

    def merged_results(
        self, shards: Mapping[Path, Mapping[str, Any]], scores: FinishedScores
    ) -> dict[str, Any] | None:
        names = {PREFIX + c for doc in shards.values() for c in doc.get("categories", {})}
        return accuracy_document(sorted(names), scores) if names else None


def accuracy_document(names: Sequence[str], scores: FinishedScores) -> dict[str, Any]:
    """BFCL's per-category accuracy, groups and overall for the run's BFCL tasks `names`."""
    header = {"mode": MODE, "handler": HANDLER, "checker_model": CHECKER_MODEL}
    categories = [name.removeprefix(PREFIX) for name in names]
    return results_document(categories, scores, header, PREFIX)


def _chat_bytes(messages: Sequence[Mapping[str, str]]) -> int:
    return len(json.dumps([m["content"] for m in messages], ensure_ascii=False).encode())


KIND = BfclKind()
