"""Judged tasks: answers graded by a judge model instead of a scorer. `--tasks mt_bench` is
MT-Bench (tasks/mtbench.py), `--tasks arena_hard` Arena-Hard-Auto (tasks/arenahard.py);
`--tasks judge:FILE` is a custom judge task, a YAML file like

    name: support_replies
    data: replies.jsonl          # rows: {"id", "question", "turns"?, "reference"?}; relative
                                 # to the task file
    sampling: {max_tokens: 256}
    judge:
      system_prompt: You grade customer-support replies.
      template: "Question: {question}\\nReply: {answer}\\nReference: {reference}\\n..."
      parser: rating             # rating ([[8]], FastChat's), pass_fail ([[PASS]]), or regex
      pattern: null              # the regex parser's pattern; its first group is the score
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.taskfiles import ARENA_HARD, JUDGE_PREFIX, MTBENCH
from evalpipe.core.configio import as_config, build, read_yaml
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks import load_tasks
from evalpipe.tasks.arenahard import Baseline, arena_hard
from evalpipe.tasks.base import Sample, Task, check_limit
from evalpipe.tasks.judging import (
    Grading,
    JudgedAnswers,
    JudgePrompt,
    Parser,
    TemplateGrading,
)
from evalpipe.tasks.mtbench import PUBLISHED_JUDGE, mtbench_grading, mtbench_tasks
from evalpipe.tasks.task import ConfiguredTask


@dataclass(frozen=True, kw_only=True)
class JudgeConfig:
    system_prompt: str
    template: str
    parser: Parser = "rating"
    pattern: str | None = None


@dataclass(frozen=True, kw_only=True)
class JudgedTaskConfig:
    name: str
    data: str
    judge: JudgeConfig
    category: str = "judged"
    sampling: SamplingSettings = field(default_factory=SamplingSettings)


@dataclass(frozen=True, kw_only=True)
class JudgedTask(JudgedAnswers):
    """A custom judge task's questions; its answers are scored by the judge alone."""

    config: JudgedTaskConfig
    rows: tuple[dict[str, Any], ...]

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def category(self) -> str:
        return self.config.category

    @property
    def sampling(self) -> SamplingSettings:
        return self.config.sampling

    def definition(self) -> dict[str, Any]:
        # The data's digest, not its rows: the manifest stays small, a changed file still shows.
        data = json.dumps(self.rows, sort_keys=True, ensure_ascii=True).encode()
        return as_config(self.config) | {"data_sha256": hashlib.sha256(data).hexdigest()}

    def samples(self, limit: int | None = None) -> list[Sample]:
        check_limit(limit)
        rows = self.rows if limit is None else self.rows[:limit]
        return [
            Sample(
                id=str(row["id"]),
                prompt=str(row["question"]),
                turns=tuple(map(str, row.get("turns", ()))),
                target={"reference": row.get("reference")},
            )
            for row in rows
        ]

    def grading(self) -> Grading:
        judge = self.config.judge
        prompt = JudgePrompt(
            name=self.name, system_prompt=judge.system_prompt, prompt_template=judge.template
        )
        return TemplateGrading(prompt=prompt, parser=judge.parser, pattern=judge.pattern)


def load_judged_task(path: Path) -> JudgedTask:
    config = build(JudgedTaskConfig, read_yaml(path), str(path))
    data = path.parent / config.data
    try:
        rows = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines() if x.strip()]
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: cannot read its data {str(data)!r}: {exc}.") from None
    bad = next((i for i, r in enumerate(rows, 1) if "id" not in r or "question" not in r), None)
    if bad is not None:
        raise DatasetError(f"{data}, line {bad}: a row needs an 'id' and a 'question'.")
    return JudgedTask(config=config, rows=tuple(rows))


@dataclass(frozen=True, kw_only=True)
class JudgedSelection:
    """The judged tasks a --tasks list names, their gradings, and the names left for the task
    files."""

    tasks: list[Task]
    gradings: dict[str, Grading]
    published: str | None  # the benchmark's published judge (MT-Bench: gpt-4)
    rest: tuple[str, ...]


def select_judged(
    names: Sequence[str], data: Path | None = None, baseline: Baseline | None = None
) -> JudgedSelection:
    """Split `names` into judged tasks (mt_bench, arena_hard, judge:FILE) and the rest. `data`:
    a folder of FastChat's llm_judge data instead of the installed package's, or for
    arena_hard a copy of the arena-hard-auto repository; `baseline`: the answers Arena-Hard
    judges against instead of its baselines' in that folder."""
    tasks: list[Task] = []
    gradings: dict[str, Grading] = {}
    published = None
    rest = []
    for name in names:
        if name == MTBENCH:
            grading = mtbench_grading(data)
            for task in mtbench_tasks(data):
                tasks.append(task)
                gradings[task.name] = grading
            published = PUBLISHED_JUDGE
        elif name == ARENA_HARD:
            if data is None:
                raise ConfigError(
                    "arena_hard reads its questions, judge prompts and baseline answers from a "
                    "copy of the arena-hard-auto repository: give its folder with --judge-data DIR."
                )
            bench = arena_hard(data, baseline)
            tasks.extend(bench.tasks)
            gradings.update(bench.gradings)
            published = bench.published
        elif name.startswith(JUDGE_PREFIX):
            task = load_judged_task(Path(name.removeprefix(JUDGE_PREFIX)))
            tasks.append(task)
            gradings[task.name] = task.grading()
        else:
            rest.append(name)
    return JudgedSelection(tasks=tasks, gradings=gradings, published=published, rest=tuple(rest))


def load_selection(
    categories: Sequence[str] | None,
    tasks: Sequence[str] | None,
    *,
    mc_method: str | None = None,
    data: Path | None = None,
    since: str | None = None,
    until: str | None = None,
) -> tuple[list[ConfiguredTask], JudgedSelection]:
    """What `--categories` and `--tasks` select: the task files' tasks (none when only judged
    tasks are named), and the judged ones."""
    judged = select_judged(tasks or (), data)
    if categories or judged.rest or not judged.tasks:
        chosen = load_tasks(
            categories=categories, tasks=judged.rest, mc_method=mc_method, since=since, until=until
        )
        return chosen, judged
    return [], judged
