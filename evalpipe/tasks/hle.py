"""Humanity's Last Exam: `hle` (the text-only questions) answered with HLE's answer format,
then graded by a judge with HLE's judge prompt and structured output (tasks/hlegrading.py).

The questions are `cais/hle` on the hub, gated: they load with the user's token or cache, or
from a local copy given with --judge-data (a .parquet or .jsonl of the test split). The answer
format (system prompts by answer type) is nvidia-hle's, read at run time from its source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import HLE_MAX_TOKENS, TaskRef
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample
from evalpipe.tasks.config import SourceConfig
from evalpipe.tasks.datasets import load_rows, read_copy
from evalpipe.tasks.gradings import BenchmarkCategory
from evalpipe.tasks.hlegrading import PREDICTIONS, SOURCE, HleGrading, hle_grading
from evalpipe.tasks.kindbase import Loaded, LoadOptions, TaskKind
from evalpipe.tasks.packaged import package_constant
from evalpipe.tasks.packages import Source

DATASET = "cais/hle"
ALL = "all"
# The judge of HLE's published leaderboard (HLE's run_judge_results.py default judge).
PUBLISHED_JUDGE = "o3-mini-2025-01-31"


def read_rows(task: str, given: Path | None) -> list[dict[str, Any]]:
    """The test split's rows: from `given` (a local copy), else the hub (gated)."""
    if given is not None:
        return read_copy(task, given)
    try:
        return load_rows(
            task, SourceConfig(uri=f"hf:{DATASET}"), split="test", config=None,
            base_dir=Path.cwd(),
        )  # fmt: skip
    except DatasetError as exc:
        cause = exc.__cause__  # what `datasets` said, without its advice for task files
        detail = f"{type(cause).__name__}: {str(cause).splitlines()[0]}" if cause else str(exc)
        raise DatasetError(
            f"HLE's questions ({DATASET} on the Hugging Face hub) are gated and not available "
            f"here ({detail}). Accept the terms at https://huggingface.co/datasets/{DATASET} and "
            "log in (`hf auth login`, or HF_TOKEN) where the data is fetched, or point "
            "HF_DATASETS_CACHE at a cache that holds it, or give a local copy of the test "
            "split: --judge-data /path/hle.parquet (or .jsonl)."
        ) from None


@dataclass(frozen=True, kw_only=True)
class HleTask(BenchmarkCategory):
    """HLE's text-only questions (task `hle`): each asked with the system prompt of its answer
    type, as nvidia-hle's prediction script sends it. Its test, `answer_type ==
    "exact_match"`, is kept as written: a type spelled otherwise (the dataset card lists
    exactMatch and multipleChoice) gets the multiple-choice format, there as here."""

    benchmark = "hle"
    id_key = "id"
    system_exact: str
    system_mc: str
    packages: tuple[Source, ...] = (SOURCE,)

    def sample(self, row: dict[str, Any]) -> Sample:
        system = self.system_exact if row["answer_type"] == "exact_match" else self.system_mc
        return Sample(
            id=str(row["id"]),
            prompt=[
                {"role": "system", "content": system},
                {"role": "user", "content": str(row["question"])},
            ],
            target={"question": str(row["question"]), "answer": str(row["answer"])},
            meta={"category": row.get("category"), "answer_type": row["answer_type"]},
        )


def hle_task(rows: Sequence[dict[str, Any]]) -> HleTask:
    """The task over the text-only rows of `rows` (those without an image)."""
    kept = tuple(r for r in rows if not r.get("image"))
    if not kept:
        raise DatasetError("HLE's data holds no text-only question.")
    return HleTask(
        name="hle",
        category="hle",
        topic="text",
        sampling=SamplingSettings(max_tokens=HLE_MAX_TOKENS, temperature=0.0),
        rows=kept,
        system_exact=package_constant(PREDICTIONS, "SYSTEM_EXACT_ANSWER"),
        system_mc=package_constant(PREDICTIONS, "SYSTEM_MC"),
    )


def refuse_images(preset: Preset | None) -> None:
    """`hle:all` asks questions with images: refused on a model that reads text only."""
    name = preset.name if preset is not None else "(none)"
    raise ConfigError(
        f"hle:all includes HLE's questions with an image (about 14 % of them), and preset "
        f"{name!r} is a text-only model (evalpipe sends text prompts only): its answers to "
        "them would be guesses. Run `hle` (the text-only questions, as HLE's text-only "
        "leaderboard does)."
    )


class HleKind(TaskKind):
    """`hle` (text-only) or `hle:all`; it honours --max-tokens."""

    name = "hle"
    measures_prompts = True

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        if any(ref.name == ALL for ref, _ in refs):
            refuse_images(options.preset)  # before anything loads
        grading: HleGrading = hle_grading()
        task = hle_task(read_rows("hle", options.judge_data))
        return Loaded(tasks=(task,), gradings={task.name: grading}, published=PUBLISHED_JUDGE)


KIND = HleKind()
