"""The judged task file kind: `--tasks judge:FILE`, answers graded by a judge model instead of
a scorer (the judged benchmarks are kinds of their own: tasks/mtbench.py, tasks/arenahard.py).
A judged task file is a YAML file like

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

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import TaskRef, judged_prompt_bytes
from evalpipe.core.configio import as_config, build, read_yaml
from evalpipe.core.errors import DatasetError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Task, check_limit
from evalpipe.tasks.gradings import (
    Grading,
    JudgedAnswers,
    JudgePrompt,
    Parser,
    TemplateGrading,
)
from evalpipe.tasks.kindbase import Loaded, LoadOptions, TaskKind


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


class JudgeFileKind(TaskKind):
    """`judge:FILE`: a judged task file; it honours --max-tokens."""

    name = "judge"

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        tasks = [load_judged_task(Path(ref.name)) for ref, _ in refs]
        return Loaded(tasks=tuple(tasks), gradings={t.name: t.grading() for t in tasks})

    def ask(self, task: Task) -> Ask:
        assert isinstance(task, JudgedTask)  # this kind loads only these
        return Ask(
            name=task.name,
            max_tokens=task.sampling.max_tokens,
            n=task.sampling.n,
            prompt_bytes=judged_prompt_bytes(task.rows),
            turns=max((1 + len(r.get("turns", ())) for r in task.rows), default=1),
        )

    def with_max_tokens(self, task: Task, max_tokens: int) -> Task:
        assert isinstance(task, JudgedTask)
        sampling = dataclasses.replace(task.sampling, max_tokens=max_tokens)
        return dataclasses.replace(task, config=dataclasses.replace(task.config, sampling=sampling))


KIND = JudgeFileKind()
