"""Arena-Hard-Auto v2: the model's answers judged pairwise against a baseline's answers, each
question in both orders (tasks/pairwise.py scores the verdicts).

Everything of the benchmark is read at run time from the user's copy of the arena-hard-auto
repository (`--judge-data DIR`, laid out as the repository): the questions
(data/<bench_name>/question.jsonl), the judge's prompt template, verdict patterns and sampling
(config/arena-hard-v2.0.yaml), the judge's system prompt and baseline per category
(JUDGE_SETTINGS in utils/judge_utils.py, read as literals, never run), and by default the
baseline's answers (data/<bench_name>/model_answer/<baseline>.jsonl). evalpipe ships none of
them. One task per question category, because each category has its own baseline.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from evalpipe.catalog.budgets import Ask
from evalpipe.catalog.suites import SuiteEntry
from evalpipe.catalog.taskrefs import ARENA_HARD_MAX_TOKENS, TaskRef
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Task
from evalpipe.tasks.gradings import BenchmarkCategory, JudgeAsk
from evalpipe.tasks.kindbase import Loaded, LoadOptions, TaskKind
from evalpipe.tasks.pairwise import (
    BASELINE_FIRST,
    MODEL_FIRST,
    Baseline,
    model_outcome,
    read_verdict,
)

CONFIG = Path("config", "arena-hard-v2.0.yaml")
JUDGE_SETTINGS = Path("utils", "judge_utils.py")
TASK_PREFIX = "arena_hard_"
# Answers are generated greedily, with the protocol's budget (catalog/taskrefs.py).
ANSWER_SAMPLING = SamplingSettings(max_tokens=ARENA_HARD_MAX_TOKENS, temperature=0.0)


def _need(root: Path, relative: Path) -> Path:
    path = root / relative
    if not path.is_file():
        raise DatasetError(
            f"{root} holds no {relative}: give --judge-data the folder of a copy of the "
            "arena-hard-auto repository (config/arena-hard-v2.0.yaml, utils/judge_utils.py, "
            "data/arena-hard-v2.0/question.jsonl and model_answer/)."
        )
    return path


def _jsonl(path: Path) -> list[dict[str, Any]]:
    # Split on newlines only: the questions' text holds other line breaks (U+2028) that
    # str.splitlines would cut a JSON line at.
    try:
        return [json.loads(x) for x in path.read_text(encoding="utf-8").split("\n") if x.strip()]
    except (OSError, ValueError) as exc:
        raise DatasetError(f"Cannot read {path}: {exc}.") from None


def _literal(node: ast.expr, names: Mapping[str, Any]) -> Any:
    """A literal built of strings, numbers, dicts and names already read: JUDGE_SETTINGS's
    shape. Anything else is refused, so nothing in the file runs."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {
            _literal(k, names): _literal(v, names)
            for k, v in zip(node.keys, node.values, strict=True)
            if k is not None
        }
    raise ValueError(f"line {node.lineno}: not a literal")


def read_judge_settings(path: Path) -> dict[str, dict[str, str]]:
    """JUDGE_SETTINGS of arena-hard-auto's utils/judge_utils.py: per category, its baseline
    model and the judge's system prompt."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names: dict[str, Any] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name):
                    names[target.id] = _literal(stmt.value, names)
        settings = names["JUDGE_SETTINGS"]
        return {
            str(category): {
                "baseline": str(s["baseline"]),
                "system_prompt": str(s["system_prompt"]),
            }
            for category, s in settings.items()
        }
    except (OSError, SyntaxError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DatasetError(
            f"Cannot read JUDGE_SETTINGS (each category's baseline and system_prompt) from "
            f"{path}: {exc!r}."
        ) from None


@dataclass(frozen=True, kw_only=True)
class ArenaConfig:
    """What arena-hard-auto's config/arena-hard-v2.0.yaml says of judging."""

    bench_name: str
    judge_model: str  # the judge the published scores come from
    prompt_template: str
    patterns: tuple[str, ...]
    sampling: SamplingSettings

    @classmethod
    def read(cls, path: Path) -> ArenaConfig:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            config = cls(
                bench_name=str(raw["bench_name"]),
                judge_model=str(raw["judge_model"]),
                prompt_template=str(raw["prompt_template"]),
                patterns=tuple(map(str, raw["regex_patterns"])),
                sampling=SamplingSettings(
                    max_tokens=int(raw["max_tokens"]), temperature=float(raw["temperature"])
                ),
            )
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            raise DatasetError(
                f"{path} is not arena-hard-auto's judging config (bench_name, judge_model, "
                f"prompt_template, regex_patterns, temperature, max_tokens): {exc!r}."
            ) from None
        if raw.get("reference"):
            raise DatasetError(
                f"{path} names reference answers ({raw['reference']!r}); evalpipe's Arena-Hard "
                "judges without them, as the published configuration does: set reference: null."
            )
        return config


def run_baseline(name: str, answered: Iterable[tuple[str, str, str]], source: str) -> Baseline:
    """The baseline a run of `arena_hard` gives: each question's first answer among `answered`
    (task, question uid, answer), the other tasks' left out; DatasetError naming `source` when
    none is Arena-Hard's."""
    answers = {uid: text for task, uid, text in answered if task.startswith(TASK_PREFIX)}
    if not answers:
        raise DatasetError(
            f"{source}: the run answered no arena_hard question; give a run of --tasks "
            "arena_hard, or a model_answer file."
        )
    return Baseline(name=name, answers=answers)


def read_model_answers(path: Path) -> Baseline:
    """A file in arena-hard-auto's model_answer layout: one answer per line, {"uid", "model",
    "messages": [..., {"role": "assistant", "content": {"answer": ...}}]}."""
    rows = _jsonl(path)
    try:
        answers = {str(r["uid"]): str(r["messages"][-1]["content"]["answer"]) for r in rows}
        names = {str(r["model"]) for r in rows}
    except (KeyError, IndexError, TypeError) as exc:
        raise DatasetError(
            f"{path} is not in arena-hard-auto's model_answer layout (uid, model, messages whose "
            f"last content holds the answer): {exc!r}."
        ) from None
    if len(names) > 1:
        raise DatasetError(f"{path} holds the answers of several models: {sorted(names)}.")
    return Baseline(name=next(iter(names), path.stem), answers=answers)


@dataclass(frozen=True, kw_only=True)
class PairwiseGrading:
    """Arena-Hard-Auto's pairwise judging (gen_judgment.py's pairwise_judgment): per question two
    judgments, game 1 with the baseline as assistant A, game 2 swapped, each the category's
    system prompt and the config's template; a verdict is read as its get_score reads it."""

    system_prompt: str
    prompt_template: str
    patterns: tuple[str, ...]
    baseline: Baseline
    sampling: SamplingSettings | None = None
    scale: ClassVar[None] = None  # verdicts, not ratings

    def asks(self, sample: Sample, answers: Sequence[str]) -> list[JudgeAsk]:
        other = self.baseline.answers.get(sample.id)
        if other is None:
            raise DatasetError(
                f"The baseline {self.baseline.name!r} has no answer to question {sample.id!r}: "
                "give --judge-baseline answers that cover every question judged."
            )
        answer = answers[-1]
        return [
            JudgeAsk(turn=1, game=BASELINE_FIRST, prompt=self._messages(sample, other, answer)),
            JudgeAsk(turn=1, game=MODEL_FIRST, prompt=self._messages(sample, answer, other)),
        ]

    def _messages(self, sample: Sample, a: str, b: str) -> list[dict[str, str]]:
        user = self.prompt_template.format(QUESTION=sample.prompt, ANSWER_A=a, ANSWER_B=b)
        return [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": user},
        ]

    def read(self, text: str, game: int | None) -> tuple[str | None, float | None]:
        """The verdict as read, and the model's result in that game (None: no verdict)."""
        label = read_verdict(text, self.patterns)
        return label, model_outcome(label, game or MODEL_FIRST)

    def definition(self) -> dict[str, Any]:
        return {
            "kind": "pairwise",
            "system_prompt": self.system_prompt,
            "prompt_template": self.prompt_template,
            "patterns": list(self.patterns),
            "baseline": self.baseline.name,
            # Other answers under the same name are another judge's work: a folder of their own.
            "baseline_sha256": hashlib.sha256(
                json.dumps(dict(sorted(self.baseline.answers.items()))).encode()
            ).hexdigest(),
            "sampling": None if self.sampling is None else self.sampling.to_dict(),
        }


@dataclass(frozen=True, kw_only=True)
class ArenaHardTask(BenchmarkCategory):
    """The questions of one Arena-Hard category (task `arena_hard_<category>`)."""

    benchmark = "arena_hard"
    id_key = "uid"

    def sample(self, row: dict[str, Any]) -> Sample:
        return Sample(
            id=str(row["uid"]),
            prompt=str(row["prompt"]),
            target=None,
            meta={"category": self.topic},
        )


@dataclass(frozen=True, kw_only=True)
class ArenaHard:
    """The benchmark as a data folder describes it: one task and one grading per category."""

    tasks: list[ArenaHardTask]
    gradings: dict[str, PairwiseGrading]
    published: str


def arena_hard(root: Path, baseline: Baseline | None = None) -> ArenaHard:
    """Arena-Hard from a copy of the arena-hard-auto repository at `root`; `baseline`: answers
    to judge against instead of each category's baseline model's in its model_answer folder."""
    config = ArenaConfig.read(_need(root, CONFIG))
    settings = read_judge_settings(_need(root, JUDGE_SETTINGS))
    data = Path("data", config.bench_name)
    rows = _jsonl(_need(root, data / "question.jsonl"))
    bad = next((i for i, r in enumerate(rows, 1) if not {"uid", "category", "prompt"} <= set(r)), 0)
    if bad:
        raise DatasetError(f"{root / data / 'question.jsonl'}, line {bad}: no uid/category/prompt.")
    topics = list(dict.fromkeys(str(r["category"]) for r in rows))
    unknown = [t for t in topics if t not in settings]
    if unknown:
        raise DatasetError(
            f"Questions of categories {unknown} have no JUDGE_SETTINGS in {root / JUDGE_SETTINGS}"
            f" (it has {', '.join(settings)})."
        )
    tasks, gradings = [], {}
    for topic in topics:
        task = ArenaHardTask(
            name=f"{TASK_PREFIX}{topic}",
            category="arena_hard",
            topic=topic,
            sampling=ANSWER_SAMPLING,
            rows=tuple(r for r in rows if r["category"] == topic),
        )
        against = baseline or read_model_answers(
            _need(root, data / "model_answer" / f"{settings[topic]['baseline']}.jsonl")
        )
        tasks.append(task)
        gradings[task.name] = PairwiseGrading(
            system_prompt=settings[topic]["system_prompt"],
            prompt_template=config.prompt_template,
            patterns=config.patterns,
            baseline=against,
            sampling=config.sampling,
        )
    return ArenaHard(tasks=tasks, gradings=gradings, published=config.judge_model)


class ArenaHardKind(TaskKind):
    """`arena_hard`: one task per category from a copy of arena-hard-auto (--judge-data); it
    honours --max-tokens (4,096 otherwise)."""

    name = "arena_hard"

    def load(
        self, refs: Sequence[tuple[TaskRef, SuiteEntry | None]], options: LoadOptions
    ) -> Loaded:
        if options.judge_data is None:
            raise ConfigError(
                "arena_hard reads its questions, judge prompts and baseline answers from a "
                "copy of the arena-hard-auto repository: give its folder with --judge-data DIR."
            )
        bench = arena_hard(options.judge_data, options.baseline)
        return Loaded(tasks=tuple(bench.tasks), gradings=bench.gradings, published=bench.published)

    def ask(self, task: Task) -> Ask:
        assert isinstance(task, ArenaHardTask)  # this kind loads only these
        longest = max(len(str(row["prompt"]).encode()) for row in task.rows)
        return Ask(name=task.name, max_tokens=task.sampling.max_tokens, prompt_bytes=longest)


KIND = ArenaHardKind()
