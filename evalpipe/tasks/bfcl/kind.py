"""The BFCL kind: `--tasks bfcl` (every category evalpipe runs: single-turn, multi-turn,
memory (memory_vector where its encoder is cached; vector.py), then web search where
SERPAPI_API_KEY is set; websearch.py) or `bfcl:CATEGORY,...`,
one task per category (a memory category two: its prerequisite conversations, then its
questions; memory.py), in the preset's BFCL mode (modes.py; memory in
BFCL's prompting and handler modes, not native); a completed run keeps BFCL's per-category
accuracy, its groups, its overall and the mode as its results document (results.py)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import (
    BFCL_CATEGORIES,
    BFCL_MEMORY,
    BFCL_MULTI_TURN,
    BFCL_WEB_SEARCH,
    TaskRef,
)
from evalpipe.core.errors import ConfigError
from evalpipe.tasks.base import Task
from evalpipe.tasks.bfcl.entries import Entries, read_entries, read_episodes
from evalpipe.tasks.bfcl.install import bfcl_dir, bfcl_version, check_memory_kv
from evalpipe.tasks.bfcl.memory import PREREQ, MemoryChain
from evalpipe.tasks.bfcl.modes import NATIVE, PROMPTING, Mode, registered
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.bfcl.results import results_document
from evalpipe.tasks.bfcl.task import PREFIX, BfclTask
from evalpipe.tasks.bfcl.vector import CATEGORY as VECTOR
from evalpipe.tasks.bfcl.vector import Encoder, find_encoder, load_failed, missing, refusal
from evalpipe.tasks.bfcl.websearch import web_search_asked
from evalpipe.tasks.kindbase import (
    FinishedScores,
    Loaded,
    LoadOptions,
    TaskKind,
)

log = logging.getLogger(__name__)

# Backends whose engine reads tool calls with the preset's tool_parser (the endpoint's server
# parses them itself).
PARSED_HERE = ("vllm", "fake")


class BfclKind(TaskKind):
    name = "bfcl"
    # A multi-turn entry's first step is the prompt of its samples; its later steps, with the
    # history grown, are priced by its request_prompts.
    measures_prompts = True

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        bfcl_dir()  # missing: one message naming the install, before anything loads
        preset = options.preset
        check_mode(preset, options.backend)
        named = [ref.name for ref, _ in refs]
        chosen = [c for c in BFCL_CATEGORIES if self.name in named or c in named]
        web = web_search_asked(chosen, named)  # SERPAPI_API_KEY, before anything loads
        chosen = [c for c in chosen if c not in BFCL_WEB_SEARCH or c in web]
        version = bfcl_version()
        wanted = preset.bfcl_mode if preset is not None else "prompting"
        model = preset.bfcl_model if preset is not None else None
        episodic = (*BFCL_MULTI_TURN, *BFCL_MEMORY, *BFCL_WEB_SEARCH)
        multi = [c for c in chosen if c in episodic]
        if wanted == "native":
            check_memory_native([c for c in multi if c in BFCL_MEMORY], named, wanted)
            multi = [c for c in multi if c not in BFCL_MEMORY]
        if "memory_kv" in multi:
            check_memory_kv()
        if VECTOR in multi:
            multi = check_vector(multi, named, missing())
        single = [c for c in chosen if c not in episodic]
        none = Entries(handler="", entries={})
        read = read_entries(single, wanted, model) if single else none
        check_prompting_only(read.skipped, named, wanted)
        single = [c for c in single if c not in read.skipped]
        episodes = read_episodes(multi, wanted, model) if multi else none
        if VECTOR in episodes.unavailable:  # its packages or encoder did not load
            why = episodes.unavailable[VECTOR]
            multi = check_vector(multi, named, [load_failed(why)])
        encoder = find_encoder() if VECTOR in multi else None
        built = read if single else episodes
        if wanted == "handler":
            mode = registered(str(model), built.handler)
        else:
            mode = NATIVE if wanted == "native" else PROMPTING
        mode = dataclasses.replace(mode, config=built.config)
        return Loaded(tasks=(
            *(BfclTask(bfcl_category=c, version=version, entries=read.entries[c], mode=mode)
              for c in single),
            *(task for c in multi
              for task in episode_tasks(c, version, episodes.entries[c], mode, encoder)),
        ))  # fmt: skip

    def results(self, tasks: Sequence[Task], scores: FinishedScores) -> dict[str, Any] | None:
        bfcl = [t for t in tasks if isinstance(t, BfclTask | BfclMultiTurnTask)
                and not t.name.endswith(PREREQ)]  # BFCL scores no prerequisite  # fmt: skip
        names = [t.name for t in bfcl]
        return accuracy_document(names, scores, bfcl[0].mode.to_dict()) if bfcl else None

    def merged_results(
        self, shards: Mapping[Path, Mapping[str, Any]], scores: FinishedScores
    ) -> dict[str, Any] | None:
        names = {PREFIX + c for doc in shards.values() for c in doc.get("categories", {})}
        mode = next((_mode_of(doc) for doc in shards.values()), _mode_of({}))
        return accuracy_document(sorted(names), scores, mode) if names else None


def episode_tasks(
    category: str,
    version: str,
    entries: Sequence[Mapping[str, Any]],
    mode: Mode,
    encoder: Encoder | None = None,
) -> tuple[BfclMultiTurnTask, ...]:
    """A multi-turn category's task; a memory category's two, sharing its chain: its
    prerequisite conversations (`bfcl_CATEGORY_prereq`), then its questions (`encoder`:
    memory_vector's, recorded with both)."""
    if category not in BFCL_MEMORY:
        return (BfclMultiTurnTask(bfcl_category=category, version=version, entries=entries,
                                  mode=mode),)  # fmt: skip
    chain = MemoryChain()
    prereqs = [e for e in entries if e["prereq"]]
    questions = [e for e in entries if not e["prereq"]]
    encoder = encoder if category == VECTOR else None
    return (
        BfclMultiTurnTask(bfcl_category=category + PREREQ, version=version, entries=prereqs,
                          mode=mode, chain=chain, questions=questions, encoder=encoder),
        BfclMultiTurnTask(bfcl_category=category, version=version, entries=questions, mode=mode,
                          chain=chain, encoder=encoder),
    )  # fmt: skip


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


def check_memory_native(memory: Sequence[str], named: Sequence[str], mode: str) -> None:
    """The memory categories run in BFCL's prompting and handler modes, not in native mode:
    named there, they are refused (plain `bfcl` leaves them out, and its results name them as
    not run)."""
    asked = [c for c in memory if c in named]
    if asked:
        raise ConfigError(
            f"BFCL's {', '.join(asked)} run in bfcl_mode prompting or handler, and this preset "
            f"asks for bfcl_mode {mode}: evalpipe runs the memory categories' prerequisite "
            "conversations and questions with BFCL's prompts only. Leave them out, or run them "
            "with bfcl_mode prompting or handler."
        )


def check_vector(multi: Sequence[str], named: Sequence[str], needs: Sequence[str]) -> list[str]:
    """`multi` without memory_vector where it lacks `needs` (vector.missing): named, it is
    refused with them, before anything loads; in plain `bfcl` it is left out (its results name
    it as not run, the overall incomplete)."""
    if not needs:
        return list(multi)
    if VECTOR in named:
        raise refusal(list(needs))
    log.warning("BFCL's memory_vector is not run: it needs %s", "; and ".join(needs))
    return [c for c in multi if c != VECTOR]


def check_prompting_only(skipped: Sequence[str], named: Sequence[str], mode: str) -> None:
    """format_sensitivity is for prompting models (`bfcl generate` skips it for FC models):
    named with an FC handler or in native mode it is refused; plain `bfcl` leaves it out."""
    asked = [c for c in skipped if c in named]
    if asked:
        raise ConfigError(
            f"BFCL's {', '.join(asked)} is run for prompting models only (bfcl generate skips "
            f"it for FC models), and this preset's bfcl_mode {mode} calls functions the FC way: "
            "leave it out, or run it with bfcl_mode prompting (or handler with a prompting "
            "model such as Qwen/Qwen3-8B)."
        )


def _mode_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """A shard's results document's mode fields (a run before modes: prompting)."""
    fields = PROMPTING.to_dict()
    return {key: document.get(key, value) for key, value in fields.items()}


def accuracy_document(
    names: Sequence[str], scores: FinishedScores, mode: Mapping[str, Any]
) -> dict[str, Any]:
    """BFCL's per-category accuracy, groups and overall for the run's BFCL tasks `names`,
    headed by the mode's fields."""
    categories = [name.removeprefix(PREFIX) for name in names]
    return results_document(categories, scores, dict(mode), PREFIX)


KIND = BfclKind()
