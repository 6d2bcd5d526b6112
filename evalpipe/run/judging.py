"""The judging phase: after generation, a judge model grades the stored answers.

Judgments stream through the same loop as samples (run/stream.py): each is a request of a
judge "task" whose scorer reads the judge's score, appended to the judge's judgments.jsonl as
it finishes. The judge's folder is named by its fingerprint (rundir/judgments.py): a resumed
phase asks only the judgments its folder lacks (and opens no judge at all when none are
missing), and a different judge, prompt or sampling writes a new folder beside the old one
from the same answers, which are never regenerated.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.catalog.registry import Preset, load_preset, with_endpoint
from evalpipe.core.errors import RunDirError
from evalpipe.engine.base import Engine, EngineSettings, SamplingSettings
from evalpipe.engine.factory import open_engine
from evalpipe.run.localplan import plan_local
from evalpipe.run.options import RunnerOptions
from evalpipe.run.stream import Hooks, Item, run_stream
from evalpipe.rundir.judgments import (
    SCORE,
    JudgeDir,
    judge_fingerprint,
    judgment_id,
    summarize_judgments,
    write_judge,
    write_judge_summary,
)
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.lock import RunLock
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.results import (
    SampleLog,
    SampleRecord,
    check_unique,
    read_samples,
    repair_samples,
    salvage_samples,
)
from evalpipe.tasks.arenahard import TASK_PREFIX, Baseline, read_model_answers
from evalpipe.tasks.base import Sample, Scored, Task
from evalpipe.tasks.judging import Grading

log = logging.getLogger(__name__)

# The judge's sampling unless told otherwise: FastChat llm_judge's client defaults (greedy,
# up to 1024 tokens of judgment).
JUDGE_SAMPLING = SamplingSettings(max_tokens=1024, temperature=0.0)


@dataclass(frozen=True, kw_only=True)
class Judge:
    """Who judges and how: `identity` names the judge model (a preset, or an endpoint's URL and
    model), without its layout; `gradings` maps each judged task's name to its grading."""

    identity: Mapping[str, Any]
    gradings: Mapping[str, Grading]
    sampling: SamplingSettings = JUDGE_SAMPLING
    published: str | None = None  # the benchmark's published judge, for the comparability line

    def definition(self) -> dict[str, Any]:
        """Everything that shapes the judgments: the judge folder's fingerprint."""
        return {
            **self.identity,
            "sampling": self.sampling.to_dict(),
            "gradings": {t: g.definition() for t, g in sorted(self.gradings.items())},
        }


def judge_for(
    options: RunnerOptions,
    model: Preset,
    gradings: Mapping[str, Grading],
    published: str | None,
) -> tuple[Judge, Callable[[], Engine]]:
    """The judge the options name, and how to open its engine: `--judge PRESET` on this
    machine's engine (the fake one when the model runs on it), or the server `--judge-base-url`
    names (its model defaults to the judge preset's, else the run's). Its identity is the judge
    model, not where it runs."""
    preset = load_preset(options.judge) if options.judge else model
    if options.judge_base_url is not None:
        backend = "openai"
        preset = with_endpoint(
            preset,
            base_url=options.judge_base_url,
            model=options.judge_model,
            api_key_env=options.judge_api_key_env,
            concurrency=options.judge_concurrency,
        )
        name = preset.endpoint.model or preset.model
    else:
        backend = "fake" if options.backend == "fake" else "vllm"
        name = preset.model
    identity = {"backend": backend, "preset": preset.name, "model": name}
    if preset.revision:
        identity["revision"] = preset.revision

    def start() -> Engine:
        layout = plan_local(
            preset, tp=None, pp=None, replicas=1, max_model_len=None,
            gpus=[] if backend in ("fake", "openai") else None,
        )  # fmt: skip
        settings = EngineSettings(tensor_parallel_size=layout.tp, pipeline_parallel_size=layout.pp)
        return open_engine(backend, preset, settings)

    sampling = JUDGE_SAMPLING
    if options.judge_max_tokens is not None:
        sampling = dataclasses.replace(sampling, max_tokens=options.judge_max_tokens)
        # A benchmark's own judge sampling (Arena-Hard's config) gives way to the flag too.
        gradings = {
            task: dataclasses.replace(
                g, sampling=dataclasses.replace(g.sampling, max_tokens=options.judge_max_tokens)
            )
            if g.sampling is not None and dataclasses.is_dataclass(g)
            else g
            for task, g in gradings.items()
        }
    judge = Judge(identity=identity, gradings=gradings, sampling=sampling, published=published)
    return judge, start


def read_baseline(path: Path) -> Baseline:
    """Arena-Hard's baseline answers from `--judge-baseline`: a file in arena-hard-auto's
    model_answer layout, or an evalpipe run directory that answered arena_hard (named after its
    preset; each question's first completion)."""
    if not path.is_dir():
        return read_model_answers(path)
    files = RunDir(path)
    manifest = read_manifest(files)
    if manifest is None:
        raise RunDirError(f"--judge-baseline {path}: no run directory (no {files.manifest.name}).")
    answers = {
        r.sample_id: r.completions[0]
        for r in read_samples(files.samples).records
        if r.task.startswith(TASK_PREFIX) and r.completions
    }
    if not answers:
        raise RunDirError(
            f"--judge-baseline {path}: the run answered no arena_hard question; give a run of "
            "--tasks arena_hard, or a model_answer file."
        )
    name = str((manifest.preset or {}).get("name") or path.name)
    return Baseline(name=name, answers=answers)


@dataclass(frozen=True, kw_only=True)
class JudgeTask:
    """The judge's side of one judged task: its requests are the asks, its score the parse."""

    name: str
    category: str
    sampling: SamplingSettings
    grading: Grading

    def definition(self) -> dict[str, Any]:
        return self.grading.definition()

    def samples(self, limit: int | None = None) -> list[Sample]:
        raise RunDirError("A judge task's samples come from the run's answers.")

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        extracted, value = self.grading.read(texts[0], sample.meta.get("game"))
        return Scored(extracted=(extracted,), scores={} if value is None else {SCORE: value})

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        return [self.score(sample, texts) for sample, texts in items]


@dataclass(frozen=True, kw_only=True)
class JudgeResult:
    folder: JudgeDir
    status: str  # "complete" or "interrupted"
    asked: int  # judgments asked by this call
    summary: dict[str, Any]


class _Stop(Hooks):
    def __init__(self, stopping: Callable[[], bool]) -> None:
        self._stopping = stopping

    def stopping(self) -> bool:
        return self._stopping()


def judge_run(
    open_judge: Callable[[], Engine],
    run_dir: Path,
    work: Sequence[tuple[Task, Sequence[Sample]]],
    judge: Judge,
    *,
    stopping: Callable[[], bool] = lambda: False,
    window: int | None = None,
) -> JudgeResult:
    """Judge the answers in `run_dir` for the samples of `work` (the run's tasks and samples)
    whose task `judge` grades; `open_judge()` is called only when a judgment is missing."""
    files = RunDir(run_dir)
    manifest = read_manifest(files)
    if manifest is None:
        raise RunDirError(f"{run_dir} holds no run to judge (no {files.manifest.name}).")
    definition = judge.definition()
    folder = JudgeDir(files, judge_fingerprint(definition))
    with RunLock(run_dir):
        answers = {r.key: r for r in read_samples(files.samples).records}
        write_judge(folder, definition, manifest.config_hash)
        repair_samples(folder.judgments)
        if salvage_samples(folder.judgments, folder.damaged):
            log.warning("Damaged judgments were moved to %s; they are asked again.", folder.damaged)
        records = read_samples(folder.judgments).records
        check_unique(records, folder.judgments)
        have = {r.key for r in records}
        items = list(_asks(work, judge, answers, have))
        status = "complete"
        if items:
            engine = open_judge()
            try:
                with SampleLog(folder.judgments) as out:

                    def write(new: Sequence[SampleRecord]) -> None:
                        out.append(new)
                        records.extend(new)

                    if not run_stream(engine, items, write, window=window, hooks=_Stop(stopping)):
                        status = "interrupted"
            finally:
                engine.close()
        summary = summarize_judgments(records, judge=definition, published_judge=judge.published)
        write_judge_summary(folder, summary)
    return JudgeResult(folder=folder, status=status, asked=len(items), summary=summary)


def _asks(
    work: Sequence[tuple[Task, Sequence[Sample]]],
    judge: Judge,
    answers: Mapping[tuple[str, str], SampleRecord],
    have: set[tuple[str, str]],
) -> list[Item]:
    """The judge's items for every answered sample, less the judgments already on disk."""
    items = []
    for task, samples in work:
        grading = judge.gradings.get(task.name)
        if grading is None:
            continue
        judge_task = JudgeTask(
            name=task.name,
            category=task.category,
            sampling=grading.sampling or judge.sampling,
            grading=grading,
        )
        for sample in samples:
            record = answers.get((task.name, sample.id))
            if record is None:
                continue  # not answered (an interrupted run): judged once it is
            for ask in grading.asks(sample, record.turns or record.completions[:1]):
                key = judgment_id(sample.id, ask.turn, ask.game)
                if (task.name, key) not in have:
                    meta = {} if ask.game is None else {"game": ask.game}
                    asked = Sample(id=key, prompt=ask.prompt, target=None, meta=meta)
                    items.append(Item(task=judge_task, sample=asked))
    return items
