"""The BFCL kind: `--tasks bfcl` (every single-turn category evalpipe runs) or
`bfcl:CATEGORY,...`, one task per category, in the preset's BFCL mode (modes.py); a completed
run keeps BFCL's per-category accuracy, and the mode, as its results document."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import BFCL_CATEGORIES, TaskRef
from evalpipe.core.errors import ConfigError
from evalpipe.tasks.base import Task
from evalpipe.tasks.bfcl.entries import read_entries
from evalpipe.tasks.bfcl.install import bfcl_dir, bfcl_version
from evalpipe.tasks.bfcl.modes import NATIVE, PROMPTING, registered
from evalpipe.tasks.bfcl.task import PREFIX, BfclTask
from evalpipe.tasks.kindbase import FinishedScores, Loaded, LoadOptions, TaskKind

NOT_BUILT = ("multi_turn", "memory", "web_search", "format_sensitivity")
# Backends whose engine reads tool calls with the preset's tool_parser (the endpoint's server
# parses them itself).
PARSED_HERE = ("vllm", "fake")


class BfclKind(TaskKind):
    name = "bfcl"

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        bfcl_dir()  # missing: one message naming the install, before anything loads
        preset = options.preset
        check_mode(preset, options.backend)
        named = [ref.name for ref, _ in refs]
        chosen = [c for c in BFCL_CATEGORIES if self.name in named or c in named]
        version = bfcl_version()
        wanted = preset.bfcl_mode if preset is not None else "prompting"
        model = preset.bfcl_model if preset is not None else None
        handler, entries = read_entries(chosen, wanted, model)
        if wanted == "handler":
            mode = registered(str(model), handler)
        else:
            mode = NATIVE if wanted == "native" else PROMPTING
        return Loaded(tasks=tuple(BfclTask(bfcl_category=c, version=version, entries=entries[c],
                                           mode=mode) for c in chosen))  # fmt: skip

    def ask(self, task: Task) -> Ask:
        assert isinstance(task, BfclTask)  # this kind loads only these
        longest = max((_prompt_bytes(e) for e in task.entries), default=None)
        return Ask(name=task.name, max_tokens=task.sampling.max_tokens, prompt_bytes=longest)

    def results(self, tasks: Sequence[Task], scores: FinishedScores) -> dict[str, Any] | None:
        bfcl = [t for t in tasks if isinstance(t, BfclTask)]
        names = [t.name for t in bfcl]
        return accuracy_document(names, scores, bfcl[0].mode.to_dict()) if bfcl else None

    def merged_results(
        self, shards: Mapping[Path, Mapping[str, Any]], scores: FinishedScores
    ) -> dict[str, Any] | None:
        names = {PREFIX + c for doc in shards.values() for c in doc.get("categories", {})}
        mode = next((_mode_of(doc) for doc in shards.values()), _mode_of({}))
        return accuracy_document(sorted(names), scores, mode) if names else None


def check_mode(preset: Preset | None, backend: str) -> None:
    """Native mode needs the preset's tool_parser where the engine reads the calls: refused
    before anything loads, naming the fix."""
    if preset is None or preset.bfcl_mode != "native" or preset.tool_parser is not None:
        return
    if backend in PARSED_HERE:
        raise ConfigError(
            f"Preset {preset.name!r} asks for BFCL's native mode (bfcl_mode: native), whose "
            "calls the engine reads with the preset's tool parser, but it names none: set "
            "tool_parser to the vLLM tool-call parser its model card documents (e.g. hermes), "
            "or set bfcl_mode prompting or handler."
        )


def _mode_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """A shard's results document's mode fields (a run before modes: prompting)."""
    fields = PROMPTING.to_dict()
    return {key: document.get(key, value) for key, value in fields.items()}


def accuracy_document(
    names: Sequence[str], scores: FinishedScores, mode: Mapping[str, Any]
) -> dict[str, Any]:
    """BFCL's per-category accuracy (correct entries over entries run), with the completions
    its decoder could not read; the groups and the overall are not computed yet, and the
    categories not run are named."""
    categories = {}
    for name in names:
        finished = scores.get(name, ())
        correct = sum(s.get("accuracy", 0.0) for _, s in finished)
        categories[name.removeprefix(PREFIX)] = {
            "accuracy": correct / len(finished) if finished else None,
            "correct": correct,
            "total": len(finished),
            "unparsed": sum(s.get("unparsed", 0.0) for _, s in finished),
        }
    return {"benchmark": "BFCL v4", **mode, "categories": categories,
            "not_run": [c for c in BFCL_CATEGORIES if c not in categories],
            "overall": None,
            "overall_note": "not computed: evalpipe does not run "
                            f"{', '.join(NOT_BUILT)} yet, which BFCL's overall counts"}  # fmt: skip


def _prompt_bytes(entry: Mapping[str, Any]) -> int:
    """An entry's prompt text and tools, in bytes."""
    prompt = entry["prompt"]
    texts = [prompt] if isinstance(prompt, str) else [m["content"] for m in prompt]
    return len(json.dumps([*texts, *entry["tools"]], ensure_ascii=False).encode())


KIND = BfclKind()
