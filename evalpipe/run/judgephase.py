"""The judging phase: after generation, a judge model grades the stored answers.

Judgments stream through the same loop as samples (run/stream.py): each is a request of a
judge "task" whose scorer reads the judge's score, appended to the judge's judgments.jsonl as
it finishes. The judge's folder is named by its fingerprint (rundir/judgments.py): a resumed
phase asks only the judgments its folder lacks (and opens no judge at all when none are
missing), and a different judge, prompt or sampling writes a new folder beside the old one
from the same answers, which are never regenerated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.core.errors import RunDirError
from evalpipe.engine.factory import open_engine
from evalpipe.engine.protocol import Engine, EngineSettings
from evalpipe.records.reasoning import split
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.localplan import plan_local
from evalpipe.run.runoptions import RunnerOptions
from evalpipe.run.stream import WAIT, Hooks, Item, Wait, run_stream
from evalpipe.rundir.judgments import (
    OUT_OF_RANGE,
    SCORE,
    JudgeDefinition,
    JudgeDir,
    JudgeSummary,
    judgment_id,
    summarize_judgments,
    write_judge,
    write_judge_summary,
)
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.lock import RunLock
from evalpipe.rundir.manifest import Manifest, read_manifest
from evalpipe.rundir.samplelog import (
    SampleLog,
    SampleRecord,
    SampleTail,
    check_unique,
    read_samples,
    repair_samples,
    salvage_samples,
)
from evalpipe.tasks.arenahard import read_model_answers, run_baseline
from evalpipe.tasks.base import Sample, Scored, Task, output_schema
from evalpipe.tasks.gradings import Grading
from evalpipe.tasks.pairwise import Baseline

log = logging.getLogger(__name__)

# The judge's sampling unless told otherwise: FastChat llm_judge's client defaults (greedy,
# up to 1024 tokens of judgment).
JUDGE_SAMPLING = SamplingSettings(max_tokens=1024, temperature=0.0)


@dataclass(frozen=True, kw_only=True)
class Judge:
    """Who judges and how: `identity` names the judge model (a preset, or an endpoint's URL and
    model), without its layout; `gradings` maps each judged task's name to its grading."""

    identity: Mapping[str, str]  # JudgeDefinition's identity fields: backend, preset, model, …
    gradings: Mapping[str, Grading]
    sampling: SamplingSettings = JUDGE_SAMPLING
    published: str | None = None  # the benchmark's published judge, for the comparability line
    # The judge preset's: a verdict is read from the answer after the judge's reasoning only.
    reasoning_parser: str | None = None

    def definition(self) -> JudgeDefinition:
        """Everything that shapes the judgments: the judge folder's fingerprint."""
        return JudgeDefinition(
            **self.identity,
            reasoning_parser=self.reasoning_parser,
            sampling=self.sampling.to_dict(),
            gradings={t: g.definition() for t, g in sorted(self.gradings.items())},
        )


def judge_for(
    options: RunnerOptions,
    model: Preset,
    gradings: Mapping[str, Grading],
    published: str | None,
) -> tuple[Judge, Callable[[], Engine]]:
    """The judge the options name, and how to open its engine: `--judge PRESET` on this
    machine's engine (the fake one when the model runs on it), or the server `--judge-base-url`
    names (its model defaults to the judge preset's, else the run's). Its identity is the judge
    model, not where it runs. The preset that describes the judge (`--judge`'s, else the run's
    when no `--judge-model` names another model) gives the reasoning parser of its verdicts."""
    asked = options.judge
    preset = load_preset(asked.preset) if asked.preset else model
    if not asked.preset and asked.endpoint.model is not None:
        # Another model than the run's, with no preset: nothing says how it marks reasoning.
        preset = dataclasses.replace(preset, reasoning_parser=None)
    if asked.endpoint.base_url is not None:
        backend = "openai"
        preset = asked.endpoint.apply(preset)
        name = preset.endpoint.model or preset.model
    else:
        backend = "fake" if options.engine.backend == "fake" else "vllm"
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
    if asked.max_tokens is not None:
        sampling = dataclasses.replace(sampling, max_tokens=asked.max_tokens)
        # A benchmark's own judge sampling (Arena-Hard's config) gives way to the flag too.
        gradings = {
            task: dataclasses.replace(
                g, sampling=dataclasses.replace(g.sampling, max_tokens=asked.max_tokens)
            )
            if g.sampling is not None and dataclasses.is_dataclass(g)
            else g
            for task, g in gradings.items()
        }
    judge = Judge(
        identity=identity,
        gradings=gradings,
        sampling=sampling,
        published=published,
        reasoning_parser=preset.reasoning_parser,
    )
    return judge, start


def read_baseline(path: Path) -> Baseline:
    """The baseline answers `--judge-baseline` names: a file of the benchmark's own answer
    layout, or an evalpipe run directory that answered it (named after its preset; each
    question's first completion)."""
    if not path.is_dir():
        return read_model_answers(path)
    files = RunDir(path)
    manifest = read_manifest(files)
    if manifest is None:
        raise RunDirError(f"--judge-baseline {path}: no run directory (no {files.manifest.name}).")
    records = read_samples(files.samples).records
    answered = ((r.task, r.sample_id, r.completions[0]) for r in records if r.completions)
    name = str((manifest.preset or {}).get("name") or path.name)
    return run_baseline(name, answered, f"--judge-baseline {path}")


@dataclass(frozen=True, kw_only=True)
class JudgeTask:
    """The judge's side of one judged task: its requests are the asks, its score the parse."""

    name: str
    category: str
    sampling: SamplingSettings
    grading: Grading
    reasoning_parser: str | None = None
    # The schema the grading asks the judge's output to follow (None: free text).
    json_schema: dict[str, Any] | None = None

    def definition(self) -> dict[str, Any]:
        return self.grading.definition()

    def samples(self, limit: int | None = None) -> list[Sample]:
        raise RunDirError("A judge task's samples come from the run's answers.")

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        """The verdict read from the judge's answer, never from its reasoning: a judgment cut
        off inside its reasoning is unparsed (a rating drafted there is not the verdict)."""
        part = split(texts[0], self.reasoning_parser)
        kept = self.reasoning_parser is not None  # without a parser: no reasoning fields
        reasoning, cut_off = ((part.reasoning,), (part.cut_off,)) if kept else ((), ())
        if part.cut_off:
            return Scored(extracted=(None,), scores={}, reasoning=reasoning, cut_off=cut_off)
        extracted, value = self.grading.read(part.answer, sample.meta.get("game"))
        scores = {} if value is None else {SCORE: value}
        scale = self.grading.scale
        if value is not None and scale is not None and not scale[0] <= value <= scale[1]:
            scores[OUT_OF_RANGE] = 1.0
        return Scored(extracted=(extracted,), scores=scores, reasoning=reasoning, cut_off=cut_off)

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        return [self.score(sample, texts) for sample, texts in items]


@dataclass(frozen=True, kw_only=True)
class JudgeResult:
    folder: JudgeDir
    status: str  # "complete" or "interrupted"
    asked: int  # judgments asked by this call (some may have been cut short by a stop)
    summary: JudgeSummary


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
    generating: Callable[[], bool] | None = None,
) -> JudgeResult:
    """Judge the answers in `run_dir` for the samples of `work` (the run's tasks and samples)
    whose task `judge` grades; `open_judge()` is called only when a judgment is missing.

    With `generating` (side by side), another process is writing the answers: the judge opens
    at once, judges each answer as its line is complete, and ends once `generating()` is False
    and every answer then written is judged. It holds the judge folder's lock alone (the
    generation holds the run's)."""
    files = RunDir(run_dir)
    manifest = read_manifest(files) if generating is None else _started(files, generating)
    if manifest is None:
        raise RunDirError(f"{run_dir} holds no run to judge (no {files.manifest.name}).")
    definition = judge.definition()
    folder = JudgeDir(files, definition.fingerprint)
    with RunLock(run_dir) if generating is None else contextlib.nullcontext():
        write_judge(folder, definition, manifest.config_hash)
        with RunLock(folder.path):  # one judge per folder, whichever placement
            repair_samples(folder.judgments)
            if salvage_samples(folder.judgments, folder.damaged):
                log.warning(
                    "Damaged judgments were moved to %s; they are asked again.", folder.damaged
                )
            records = read_samples(folder.judgments).records
            check_unique(records, folder.judgments)
            have = {r.key for r in records}
            asked = len(have)
            index = _index(work, judge)
            items: Iterable[Item | Wait]
            if generating is None:
                answers = read_samples(files.samples).records
                items = [i for r in answers for i in _asks(index, r, have)]
            else:
                items = _following(index, SampleTail(files.samples), have, generating)
            status = "complete"
            if items:
                engine = open_judge()
                try:
                    with SampleLog(folder.judgments) as out:

                        def write(new: Sequence[SampleRecord]) -> None:
                            out.append(new)
                            records.extend(new)

                        if not run_stream(
                            engine, items, write, window=window, hooks=_Stop(stopping)
                        ):
                            status = "interrupted"
                finally:
                    engine.close()
            summary = summarize_judgments(
                records, judge=definition, published_judge=judge.published
            )
            write_judge_summary(folder, summary)
    return JudgeResult(folder=folder, status=status, asked=len(have) - asked, summary=summary)


# How often a judge beside the generation looks for its manifest before it has one.
POLL_S = 0.2


def _started(files: RunDir, generating: Callable[[], bool]) -> Manifest | None:
    """The run's manifest once the generation beside this judge has written it (None: the
    generation ended without starting the run)."""
    while True:
        ended = not generating()
        manifest = read_manifest(files)
        if manifest is not None or ended:
            return manifest
        time.sleep(POLL_S)


def _following(
    index: Mapping[tuple[str, str], tuple[JudgeTask, Sample]],
    tail: SampleTail,
    have: set[tuple[str, str]],
    generating: Callable[[], bool],
) -> Iterator[Item | Wait]:
    """The judge's items for each answer as its line is complete, then WAIT while the
    generation goes on; done once it has ended and a last read found nothing new."""
    while True:
        ended = not generating()  # before the read: that read then sees every answer
        new = tail.read()
        for record in new:
            yield from _asks(index, record, have)
        if ended and not new:
            return
        if not new:
            yield WAIT


def _index(
    work: Sequence[tuple[Task, Sequence[Sample]]], judge: Judge
) -> dict[tuple[str, str], tuple[JudgeTask, Sample]]:
    """Each judged sample of `work` by its record's key, with its task's judge side."""
    index = {}
    for task, samples in work:
        grading = judge.gradings.get(task.name)
        if grading is None:
            continue
        judge_task = JudgeTask(
            name=task.name,
            category=task.category,
            sampling=grading.sampling or judge.sampling,
            grading=grading,
            reasoning_parser=judge.reasoning_parser,
            json_schema=output_schema(grading),
        )
        index |= {(task.name, sample.id): (judge_task, sample) for sample in samples}
    return index


def _asks(
    index: Mapping[tuple[str, str], tuple[JudgeTask, Sample]],
    record: SampleRecord,
    have: set[tuple[str, str]],
) -> list[Item]:
    """The judge's items for one answered sample (none when `index` does not judge it), less
    the judgments in `have`, to which they are added: an answer read twice is asked once."""
    if record.key not in index or (record.refusal is not None and not record.turns):
        return []  # not judged here, or refused before any answer: nothing to judge
    judge_task, sample = index[record.key]
    items = []
    for ask in judge_task.grading.asks(sample, record.turns or record.completions[:1]):
        key = (judge_task.name, judgment_id(sample.id, ask.turn, ask.game))
        if key not in have:
            have.add(key)
            meta = {} if ask.game is None else {"game": ask.game}
            asked = Sample(id=key[1], prompt=ask.prompt, target=None, meta=meta)
            items.append(Item(task=judge_task, sample=asked))
    return items
