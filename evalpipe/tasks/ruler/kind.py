"""The `ruler` kind: `ruler` (RULER's 13 tasks) or `ruler:TASK,...`, each at every length of
--ruler-lengths (default: powers of two from 4,096 up to the model's context) as one evalpipe
task, `ruler_<task>_<length>`, its samples generated for the preset's tokenizer (generate.py)
and scored with RULER's metric (metrics.py). A completed run keeps RULER's table, scores per
task and length and the average per length, as its ruler_results.json."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from evalpipe.catalog.budgets import TEMPLATE_TOKENS, Ask
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import (
    RULER_MIN_LENGTH,
    RULER_TASKS,
    TaskRef,
    ruler_default_lengths,
)
from evalpipe.catalog.weights import model_source
from evalpipe.core.errors import ConfigError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Scored, Task, check_limit
from evalpipe.tasks.kindbase import FinishedScores, Loaded, LoadOptions, TaskKind
from evalpipe.tasks.ruler import generate, install, metrics

KIND_NAME = "ruler"
SEED = 42  # prepare.py's (42 plus the chunk index, one chunk)
DEFAULT_SAMPLES = 500  # prepare.py's --num_samples default


def check_lengths(preset: Preset, given: Sequence[int] | None) -> tuple[int, ...]:
    """The lengths a run generates for on `preset`: `given` (--ruler-lengths), else the
    default; ConfigError naming a length below RULER's shortest or beyond the model's context."""
    ceiling = preset.architecture.context_ceiling  # the rope-scaled length where configured
    lengths = tuple(sorted(set(given))) if given else ruler_default_lengths(ceiling)
    if not lengths:
        raise ConfigError(
            f"RULER: preset {preset.name!r} has a context of "
            f"{preset.architecture.ceiling_text()} tokens, below RULER's shortest length, "
            f"{RULER_MIN_LENGTH}. Run RULER on a model with a longer context."
        )
    short = [n for n in lengths if n < RULER_MIN_LENGTH]
    if short:
        raise ConfigError(
            f"--ruler-lengths {','.join(map(str, short))}: below {RULER_MIN_LENGTH}, RULER's "
            "shortest length (its generators cannot fit a haystack in less and may never "
            "finish). Give "
            f"lengths of {RULER_MIN_LENGTH} tokens or more."
        )
    long = [n for n in lengths if n > ceiling]
    if long:
        raise ConfigError(
            f"--ruler-lengths {','.join(map(str, long))}: beyond the context of preset "
            f"{preset.name!r}, {preset.architecture.ceiling_text()} tokens. Leave them out (the "
            f"default is {','.join(map(str, ruler_default_lengths(ceiling))) or 'none'}), or use a "
            "preset whose model holds that length (or give the preset the rope_scaling its "
            "model card documents: docs/planner.md)."
        )
    return lengths


def task_name(task: str, length: int) -> str:
    return f"ruler_{task}_{length}"


@dataclass(frozen=True, kw_only=True)
class RulerTask:
    """One RULER task at one length: samples from its generator, scored by its metric."""

    name: str
    ruler_task: str
    length: int
    tokenizer: str  # the folder or hub id the generator reads the tokenizer from
    sampling: SamplingSettings
    category: str = KIND_NAME
    kind: ClassVar[str] = KIND_NAME

    @property
    def generator(self) -> generate.Generator:
        return generate.generator(self.ruler_task)

    @property
    def metric(self) -> metrics.Metric:
        return metrics.metrics()[self.generator.script]

    def definition(self) -> dict[str, Any]:
        return {
            "benchmark": KIND_NAME,
            "task": self.ruler_task,
            "length": self.length,
            "max_seq_length": generate.max_seq_length(self.length),
            "seed": SEED,
            "tokenizer": generate.tokenizer_identity(self.tokenizer),
            "versions": install.versions(),
            "metric": self.metric.name,
            "sampling": self.sampling.to_dict(),
        }

    def samples(self, limit: int | None = None) -> list[Sample]:
        # The generators draw sample after sample from one seeded stream, so the first N of a
        # longer draw are the draw of N: a limit generates only those.
        check_limit(limit)
        count = limit or DEFAULT_SAMPLES
        rows = generate.samples(
            self.ruler_task, length=self.length, seed=SEED, count=count, tokenizer=self.tokenizer
        )
        return [
            Sample(id=str(row["index"]), prompt=row["input"],
                   target={"outputs": list(row["outputs"])},
                   meta={"tokens": row["length"]})
            for row in rows
        ]  # fmt: skip

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        pred, value = metrics.sample_value(self.metric, texts[0], sample.target["outputs"])
        return Scored(extracted=(pred,), scores={self.metric.name: value})

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        return [self.score(sample, texts) for sample, texts in items]


class RulerKind(TaskKind):
    """`ruler` or `ruler:TASK,...`; the lengths from LoadOptions.ruler_lengths."""

    name = KIND_NAME

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        preset = options.preset
        if preset is None:
            raise ConfigError(
                "RULER's samples are generated for a model's tokenizer, so they need a preset: "
                "evalpipe run --preset PRESET --tasks ruler (docs/ruler.md)."
            )
        install.ruler_dir()  # refused with the install command before anything else
        names = dict.fromkeys(
            name for ref, _ in refs
            for name in (RULER_TASKS if ref.name == KIND_NAME else (ref.name,))
        )  # fmt: skip
        lengths = check_lengths(preset, options.ruler_lengths)
        tokenizer = model_source(preset)
        tasks = tuple(
            RulerTask(
                name=task_name(task, length),
                ruler_task=task,
                length=length,
                tokenizer=tokenizer,
                sampling=SamplingSettings(
                    max_tokens=generate.generator(task).tokens_to_generate, temperature=0.0
                ),
            )
            for task in names
            for length in lengths
        )
        return Loaded(tasks=tasks)

    def ask(self, task: Task) -> Ask:
        """The prompt's exact bound: the generator keeps prompt and answer within the length
        less the template's margin, which the context rule adds back."""
        if not isinstance(task, RulerTask):
            raise TypeError(f"{task.name} is not a RULER task")
        budget = task.sampling.max_tokens
        prompt = generate.max_seq_length(task.length) - task.generator.tokens_to_generate
        return Ask(name=task.name, max_tokens=budget, prompt_tokens=prompt)

    def notes(self, tasks: Sequence[Task]) -> list[str]:
        if not tasks:
            return []
        return [
            *install.off_pin(),
            f"RULER: samples generated for the model's tokenizer at each length less "
            f"{TEMPLATE_TOKENS} tokens, kept for the chat template (docs/ruler.md)",
        ]

    def results(self, tasks: Sequence[Task], scores: FinishedScores) -> dict[str, Any] | None:
        ruler = {t.name: (t.ruler_task, t.length, t.metric.name)
                 for t in tasks if isinstance(t, RulerTask)}  # fmt: skip
        return ruler_document(ruler, scores) if ruler else None

    def merged_results(
        self, shards: Mapping[Path, Mapping[str, Any]], scores: FinishedScores
    ) -> dict[str, Any] | None:
        ruler = {name: tuple(entry) for doc in shards.values()
                 for name, entry in (doc.get("tasks") or {}).items()}  # fmt: skip
        return ruler_document(ruler, scores) if ruler else None  # type: ignore[arg-type]


def ruler_document(
    tasks: Mapping[str, tuple[str, int, str]], scores: FinishedScores
) -> dict[str, Any]:
    """RULER's table: each task's score at each length (its samples' values in index order,
    as RULER's metric sums them) with the samples counted, and the mean over the tasks scored
    at each length (RULER's average column)."""
    table: dict[str, dict[str, dict[str, float | int]]] = {}
    for name, (task, length, metric) in tasks.items():
        finished = sorted(scores.get(name, ()), key=lambda pair: int(pair[0]))
        values = [found[metric] for _, found in finished if metric in found]
        if values:
            cell = {"score": metrics.task_score(values), "n": len(values)}
            table.setdefault(task, {})[str(length)] = cell
    lengths = sorted({int(length) for row in table.values() for length in row})
    average = {
        str(n): round(sum(s) / len(s), 2)
        for n in lengths
        if (s := [row[str(n)]["score"] for row in table.values() if str(n) in row])
    }
    order = [t for t in RULER_TASKS if t in table]
    return {
        "benchmark": KIND_NAME,
        "lengths": lengths,
        "scores": {task: table[task] for task in order},
        "average": average,
        "tasks": {name: list(entry) for name, entry in tasks.items()},
    }


KIND = RulerKind()
