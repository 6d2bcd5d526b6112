"""A Task built from a task file: samples with stable ids, deterministic limits, scoring."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.configio import as_config, first_repeat
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.records.reasoning import split
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Option, Sample, Scored, check_limit
from evalpipe.tasks.config import ShuffleConfig, TaskConfig
from evalpipe.tasks.datasets import Row, load_rows
from evalpipe.tasks.mcq import shuffled_rows
from evalpipe.tasks.packages import Source
from evalpipe.tasks.prompts import PromptBuilder
from evalpipe.tasks.records import Record, build_record, lookup
from evalpipe.tasks.scorerkinds import build_scorer, scorer_kind
from evalpipe.tasks.scorers import RunPrograms

# (sample id, subset or None, raw row)
Item = tuple[str, str | None, Row]


class ConfiguredTask:
    """Implements the Task protocol for one TaskConfig.

    Sample ids: the `id` field (or an `id` column), else the row's position in its split;
    prefixed with `SUBSET/` when the task has subsets. `limit` keeps the N samples whose
    SHA-256 of "seed:id" is smallest, in dataset order: a spread over the whole set (not its
    first N, which for MMLU would be one subject), stable across runs and machines, and nested
    (the samples of --limit 20 are among those of --limit 40).
    """

    def __init__(
        self,
        config: TaskConfig,
        *,
        path: Path,
        run_programs: RunPrograms | None = None,
        reasoning_parser: str | None = None,
        sampling: SamplingSettings | None = None,
    ) -> None:
        self.config = config
        self.reasoning_parser = reasoning_parser
        self.run_programs = run_programs
        self.name = config.name
        self.category = config.category
        # What the engine generates with: the file's settings, or the effective ones of the
        # generation_config rule (evalpipe/tasks/generation.py).
        self.sampling = sampling or config.sampling
        if config.shuffle is not None and self.sampling.n != 1:
            raise ConfigError(
                f"Task {config.name!r} ({path}) shuffles its options per prompt, so it generates "
                f"one completion per prompt, not n = {self.sampling.n}: set shuffle.repeats "
                "in a copy of the task file for several prompts, each with its own option order."
            )
        self.path = path
        self._prompts = PromptBuilder(config.prompt, str(path))
        self._scorer = build_scorer(config.scorer, run_programs=run_programs)
        self._items: dict[str, list[Item]] = {}

    @property
    def runs_code(self) -> bool:
        """Whether scoring runs model-written code in the sandbox (tasks.base.runs_code)."""
        return self.config.scorer.kind == "code"

    def with_config(self, config: TaskConfig) -> ConfiguredTask:
        """This task with another configuration (an overridden part), its settings kept."""
        return ConfiguredTask(
            config,
            path=self.path,
            run_programs=self.run_programs,
            reasoning_parser=self.reasoning_parser,
            sampling=None if self.sampling is self.config.sampling else self.sampling,
        )

    def with_sampling(self, sampling: SamplingSettings) -> ConfiguredTask:
        """This task generating with `sampling` instead of its file's settings."""
        return ConfiguredTask(
            self.config,
            path=self.path,
            run_programs=self.run_programs,
            reasoning_parser=self.reasoning_parser,
            sampling=sampling,
        )

    @property
    def metrics(self) -> tuple[str, ...]:
        """Names of the per-sample metrics `score` reports."""
        scorer = self.config.scorer
        return scorer_kind(scorer).metrics(scorer, self.sampling.n)

    @property
    def packages(self) -> tuple[Source, ...]:
        """The installed packages its prompts (package_constant) and its scorer read from."""
        return tuple(sorted({*self._prompts.packages, *scorer_kind(self.config.scorer).packages}))

    def definition(self) -> dict[str, Any]:
        """The resolved task file, without its path (the same task resumes on another host)."""
        return as_config(self.config)

    def samples(self, limit: int | None = None) -> list[Sample]:
        check_limit(limit)
        items = self._load(self.config.source.split)
        if limit is not None and limit < len(items):
            seed = self.config.seed
            keep = set(sorted((i[0] for i in items), key=lambda x: _rank(seed, x))[:limit])
            items = [i for i in items if i[0] in keep]
        shots = self._shot_pools()
        return [self._sample(item, shots) for item in items]

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        return self.score_many([(sample, texts)])[0]

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        """Score several samples at once: code tasks run all their programs in one pool.

        With a reasoning parser only each completion's final answer is scored; a completion
        cut off inside its reasoning is scored as an empty (unanswered) one."""
        scored = self._score_answers(items)
        if not self.config.scorer.by_subset:
            return scored
        return [
            dataclasses.replace(result, scores=result.scores | _per_subset(sample, result.scores))
            for (sample, _), result in zip(items, scored, strict=True)
        ]

    def _score_answers(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        if self.reasoning_parser is None:
            return self._scorer.score_many([(s.target, texts) for s, texts in items])
        splits = [[split(t, self.reasoning_parser) for t in texts] for _, texts in items]
        scored = self._scorer.score_many(
            [
                (s.target, [p.answer for p in parts])
                for (s, _), parts in zip(items, splits, strict=True)
            ]
        )
        return [
            dataclasses.replace(
                result,
                extracted=tuple(
                    None if p.cut_off else e for p, e in zip(parts, result.extracted, strict=True)
                ),
                reasoning=tuple(p.reasoning for p in parts),
                cut_off=tuple(p.cut_off for p in parts),
            )
            for result, parts in zip(scored, splits, strict=True)
        ]

    # --- loading ----------------------------------------------------------------------------

    def _record(self, item: Item) -> Record:
        try:
            return build_record(item[2], self.config.fields, self.config.scorer)
        except DatasetError as exc:
            raise self._at(item[0], exc) from exc

    def _at(self, sample_id: str, exc: DatasetError) -> DatasetError:
        return DatasetError(f"Task {self.name!r} ({self.path}), sample {sample_id}: {exc}")

    def _sample(self, item: Item, shots: dict[str | None, list[Record]]) -> Sample:
        sample_id, subset, _ = item
        record = self._record(item)
        try:
            reference = scorer_kind(self.config.scorer).target(record, self.config.scorer)
        except DatasetError as exc:
            raise self._at(sample_id, exc) from exc
        examples = shots.get(subset if subset in shots else None, [])
        meta: dict[str, Any] = {"subset": subset} if subset is not None else {}
        if self.config.shuffle is not None:
            meta["permutation"] = record["permutation"]
        return Sample(
            id=sample_id,
            prompt=self._prompts.build(record, examples),
            target=reference,
            meta=meta,
            options=self._options(record),
        )

    def _options(self, record: Record) -> tuple[Option, ...]:
        """Ranked options for method logprobs: each follows the prompt after a space, as an
        answer would in running text (" B" or " Paris"); a chat model's reply drops it."""
        scorer = self.config.scorer
        if scorer.method != "logprobs":
            return ()
        texts = record["letters"] if scorer.continuation in (None, "letter") else record["choices"]
        return tuple(
            Option(answer=letter, continuation=f" {text}")
            for letter, text in zip(record["letters"], texts, strict=True)
        )

    def _shot_pools(self) -> dict[str | None, list[Record]]:
        """The first `shots` records of the examples split, per subset (None: all)."""
        prompt = self.config.prompt
        if not prompt.shots or prompt.shots_split is None:
            return {}
        pools: dict[str | None, list[Record]] = {}
        for item in self._load(prompt.shots_split):
            for key in {item[1], None}:
                pool = pools.setdefault(key, [])
                if len(pool) < prompt.shots:
                    pool.append(self._record(item))
        return pools

    def _load(self, split: str) -> list[Item]:
        if split not in self._items:
            self._items[split] = self._read(split)
        return self._items[split]

    def _read(self, split: str) -> list[Item]:
        cfg = self.config
        subsets = cfg.subsets
        if subsets is not None and subsets.by == "config":
            items = []
            for value in subsets.values:
                rows = self._rows(split, value)
                items += self._identify(rows, value)
            return _unique(cfg.name, items)
        rows = self._rows(split, cfg.source.config)
        if cfg.shuffle is not None and split == cfg.source.split:
            return _unique(cfg.name, self._shuffled(rows, cfg.shuffle))
        if subsets is None:
            return _unique(cfg.name, self._identify(rows, None))
        column = subsets.by
        if rows and column not in rows[0]:
            raise DatasetError(
                f"Task {cfg.name!r}: subsets by {column!r}, but rows have no such column; "
                f"columns: {', '.join(sorted(rows[0]))}."
            )
        wanted = set(subsets.values)
        unknown = wanted - {str(r[column]) for r in rows}
        if unknown:
            raise DatasetError(
                f"Task {cfg.name!r}: no rows with {column} = {', '.join(sorted(unknown))} in split "
                f"{split!r}; check subsets.values against the dataset."
            )
        items = [
            (f"{row[column]}/{sample_id}", str(row[column]), row)
            for sample_id, _, row in self._identify(rows, None)
            if not wanted or str(row[column]) in wanted
        ]
        return _unique(cfg.name, items)

    def _shuffled(self, rows: list[Row], shuffle: ShuffleConfig) -> list[Item]:
        """Every repeat of every row with its options permuted (ids `ID@R` for several)."""
        ids = [sample_id for sample_id, _, _ in self._identify(rows, None)]
        missing = [c for c in shuffle.columns if rows and c not in rows[0]]
        if missing:
            raise DatasetError(
                f"Task {self.name!r}: shuffle.columns {', '.join(map(repr, missing))} are not "
                f"in the rows; columns: {', '.join(sorted(rows[0]))}."
            )
        out = shuffled_rows(rows, shuffle.columns, seed=shuffle.seed, repeats=shuffle.repeats)
        return [
            (ids[i % len(rows)] + (f"@{repeat}" if shuffle.repeats > 1 else ""), None, row)
            for i, (repeat, row) in enumerate(out)
        ]

    def _rows(self, split: str, config: str | None) -> list[Row]:
        """The split's rows, those outside the task's date window left out."""
        cfg = self.config
        base = self.path.parent
        rows = load_rows(cfg.name, cfg.source, split=split, config=config, base_dir=base)
        if cfg.dates is None:
            return rows
        return [row for row in rows if cfg.dates.keeps(row, cfg.name)]

    def _identify(self, rows: list[Row], subset: str | None) -> list[Item]:
        path = self.config.fields.get("id")
        prefix = f"{subset}/" if subset is not None else ""
        items = []
        for index, row in enumerate(rows):
            raw = lookup(row, path) if path is not None else row.get("id", index)
            items.append((f"{prefix}{raw}", subset, row))
        return items


def _unique(task: str, items: list[Item]) -> list[Item]:
    sample_id = first_repeat(sample_id for sample_id, _, _ in items)
    if sample_id is not None:
        raise DatasetError(
            f"Task {task!r}: sample id {sample_id!r} occurs twice; map a unique column as "
            "`fields: {id: COLUMN}` or remove the duplicate rows."
        )
    return items


def _per_subset(sample: Sample, scores: dict[str, float]) -> dict[str, float]:
    """`METRIC/SUBSET` for the primary (first) metric: the summary's per-subset breakdown."""
    subset = sample.meta.get("subset")
    metric = next(iter(scores), None)
    return {} if subset is None or metric is None else {f"{metric}/{subset}": scores[metric]}


def _rank(seed: int, sample_id: str) -> str:
    return hashlib.sha256(f"{seed}:{sample_id}".encode()).hexdigest()
