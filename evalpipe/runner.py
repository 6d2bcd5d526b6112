"""Run tasks through one engine into a run directory, resumably (orchestration only).

Order of work: check the directory against the configuration (before paying for a model load),
load the engine once, then for each task generate its pending samples in chunks, score them and
append them to samples.jsonl. The manifest is rewritten after every chunk, so timings survive a
kill; a stop signal is honoured between chunks.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalpipe import exitcodes, provenance
from evalpipe.checkpoint import check_resume, config_hash
from evalpipe.engine.base import Engine, EngineSettings, Generation, Prompt
from evalpipe.errors import ConfigError, EngineError, RunDirError
from evalpipe.progress import Progress
from evalpipe.registry import Preset
from evalpipe.results import (
    MANIFEST,
    METRICS,
    SAMPLES,
    SCHEMA,
    SUMMARY,
    SampleRecord,
    append_samples,
    check_unique,
    read_json,
    read_samples,
    repair_samples,
    write_json,
)
from evalpipe.summary import summarize_run
from evalpipe.tasks.base import Sample, Task

# Prompts per generate() call: enough for vLLM to keep its batch full (it schedules up to
# max_num_seqs at once), small enough that a chunk finishes well inside a preemption warning.
DEFAULT_CHUNK_SIZE = 256

# Tokens a chat template may add around a prompt (role markers, BOS, a default system prompt such
# as SmolLM2's), and per further message. Generous on purpose: see prompt_token_bound.
TEMPLATE_TOKENS = 64
MESSAGE_TOKENS = 8


@dataclass(frozen=True, kw_only=True)
class Shard:
    """Slice i of N: every N-th sample by index, starting at i. The N slices partition a run."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ConfigError(
                f"Shard {self.index}/{self.count} is invalid: the count must be ≥ 1 and the "
                f"index in 0..count-1."
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        index, sep, count = text.partition("/")
        if not sep or not index.strip().isdigit() or not count.strip().isdigit():
            raise ConfigError(f"Shard {text!r} must look like i/N, e.g. 0/4.")
        return cls(index=int(index), count=int(count))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def select(self, samples: Sequence[Sample]) -> list[Sample]:
        return list(samples[self.index :: self.count])


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What to run: everything in here except `engine` and `chunk_size` is fingerprinted."""

    backend: str
    engine: EngineSettings = field(default_factory=EngineSettings)
    categories: tuple[str, ...] | None = None
    limit: int | None = None
    shard: Shard | None = None
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be a positive number of samples, got {self.limit}.")
        if self.chunk_size < 1:
            raise ConfigError(f"chunk size must be ≥ 1, got {self.chunk_size}.")


class PhaseMonitor(Protocol):
    """The GPU/CPU sampler as the runner uses it (evalpipe.monitor.Monitor, started).

    stop() returns per-device summaries covering every attempt of the run (the monitor resumes
    its metrics.csv), so the runner stores the latest ones rather than adding them up."""

    def set_phase(self, name: str) -> None: ...

    def stop(self) -> list[dict[str, Any]]: ...


class StopFlag(Protocol):
    requested: str | None


@dataclass(frozen=True, kw_only=True)
class RunResult:
    status: str  # "complete" or "interrupted"
    run_dir: Path
    summary: dict[str, Any]

    @property
    def exit_status(self) -> int:
        return exitcodes.OK if self.status == "complete" else exitcodes.RESUMABLE


def run_config(preset: Preset, tasks: Sequence[Task], options: RunOptions) -> dict[str, Any]:
    """The manifest's `config`; JSON round-tripped so it compares equal to a stored one."""
    config = {
        "preset": preset.name,
        "model": {
            "model": preset.model,
            "revision": preset.revision,
            "chat": preset.chat,
            "dtype": preset.dtype,
            "quantization": preset.quantization,
            "kv_cache_dtype": preset.kv_cache_dtype,
            "max_model_len": options.engine.max_model_len or preset.max_model_len,
            "seed": preset.seed,
        },
        "backend": options.backend,
        "categories": list(options.categories) if options.categories else None,
        "tasks": [t.name for t in tasks],
        "definitions": {t.name: t.definition() for t in tasks},
        "limit": options.limit,
        "shard": str(options.shard) if options.shard else None,
        "sampling": {t.name: dataclasses.asdict(t.sampling) for t in tasks},
        "engine": dataclasses.asdict(options.engine),
    }
    return json.loads(json.dumps(config))


def select_samples(task: Task, options: RunOptions) -> list[Sample]:
    """The samples this run owes for `task`: the limit first, then the shard's slice."""
    samples = task.samples(options.limit)
    seen: set[str] = set()
    for sample in samples:
        if sample.id in seen:
            raise ConfigError(
                f"Task {task.name!r} yields sample id {sample.id!r} twice; sample ids must be "
                "unique so that resume and merge can key on them."
            )
        seen.add(sample.id)
    return options.shard.select(samples) if options.shard else samples


def prompt_token_bound(prompt: Prompt) -> int:
    """An upper bound on a prompt's length in tokens, without loading a tokenizer: byte-level
    BPE and byte-fallback tokenizers spend at least one UTF-8 byte per token."""
    if isinstance(prompt, str):
        return TEMPLATE_TOKENS + len(prompt.encode())
    return TEMPLATE_TOKENS + sum(
        len(str(m.get("content", "")).encode()) + MESSAGE_TOKENS for m in prompt
    )


def needed_model_len(work: Sequence[tuple[Task, Sequence[Sample]]]) -> int:
    """The longest sequence the run may need (prompt bound + max_tokens): the OOM ladder may
    shorten max_model_len down to this, never below."""
    return max(
        (prompt_token_bound(s.prompt) + _answer_bound(task, s) for task, ss in work for s in ss),
        default=1,
    )


def _answer_bound(task: Task, sample: Sample) -> int:
    if sample.options:  # scored, not generated
        return max(len(option.continuation.encode()) for option in sample.options)
    return task.sampling.max_tokens


def _chunks(items: Sequence[Sample], size: int) -> Iterator[Sequence[Sample]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _Run:
    """One attempt at a run directory: owns the manifest dict and rewrites it as work proceeds."""

    def __init__(self, out_dir: Path, manifest: dict[str, Any]) -> None:
        self.out_dir = out_dir
        self.manifest = manifest
        self.started = time.monotonic()
        self.attempt: dict[str, Any] | None = None

    def begin_attempt(self) -> None:
        for previous in self.manifest["attempts"]:
            if previous["status"] == "running":  # that process died without a word (kill -9)
                previous["status"] = "lost"
        self.attempt = {
            "started_at": provenance.utc_now(),
            "finished_at": None,
            "status": "running",
            "host": provenance.host(),
            "slurm": provenance.slurm_ids(),
            "git_sha": provenance.git_sha(),
            "wall_s": 0.0,
        }
        m = self.manifest
        m["attempts"].append(self.attempt)
        m["status"] = "running"
        m["finished_at"] = None
        m["slurm"] = self.attempt["slurm"]
        m["git_sha"] = self.attempt["git_sha"]
        if self.attempt["host"] not in m["hosts"]:
            m["hosts"].append(self.attempt["host"])
        self.save()

    def add_time(self, phase: str, seconds: float) -> None:
        timings = self.manifest["timings"]
        timings[phase] = round(timings.get(phase, 0.0) + seconds, 6)

    def note_engine(self, engine: Engine) -> None:
        """Record the engine's effective settings and OOM fallback steps (they can change while
        it generates)."""
        describe = getattr(engine, "describe", None)
        if describe is not None:
            self.manifest["engine"] = describe()
        for step in getattr(engine, "fallback_steps", []):
            if step not in self.manifest["oom_fallback"]:
                self.manifest["oom_fallback"].append(step)

    def save(self) -> None:
        if self.attempt is not None:
            self.attempt["wall_s"] = round(time.monotonic() - self.started, 3)
        write_json(self.out_dir / MANIFEST, self.manifest)

    def finish(self, status: str, records: list[SampleRecord], error: str | None = None) -> dict:
        now = provenance.utc_now()
        if self.attempt is not None:
            self.attempt["status"] = status
            self.attempt["finished_at"] = now
        self.manifest["status"] = status
        self.manifest["finished_at"] = now
        if error is not None:
            self.manifest["error"] = error
        else:
            self.manifest.pop("error", None)
        self.save()
        summary = summarize_run(records, self.manifest)
        write_json(self.out_dir / SUMMARY, summary)
        return summary


def _new_manifest(
    out_dir: Path, preset: Preset, config: dict[str, Any], planned: list[dict[str, Any]]
) -> dict[str, Any]:
    plan_file = out_dir / "plan.json"  # written beside the run by `evalpipe submit`
    return {
        "schema": SCHEMA,
        "run_id": out_dir.name,
        "status": "running",
        "preset": None,  # set for every attempt
        "plan": read_json(plan_file) if plan_file.exists() else None,
        "config": config,
        "config_hash": config_hash(config),
        "versions": provenance.versions(),
        "git_sha": provenance.git_sha(),
        "hosts": [],
        "slurm": provenance.slurm_ids(),
        "seed": preset.seed,
        "timings": {},
        "oom_fallback": [],
        "started_at": provenance.utc_now(),
        "finished_at": None,
        "samples_planned": planned,
        "engine": None,
        # Per-device summaries from the monitor, which carries them over from earlier attempts
        # through metrics.csv.
        "devices": [],
        "attempts": [],
    }


def _load_existing(
    out_dir: Path, config: dict[str, Any], planned_keys: set[tuple[str, str]]
) -> tuple[dict[str, Any] | None, list[SampleRecord]]:
    """The directory's manifest (None if new) and its finished samples, after checking both."""
    samples_path = out_dir / SAMPLES
    manifest_path = out_dir / MANIFEST
    if not manifest_path.exists():
        if samples_path.exists():
            raise RunDirError(
                f"{samples_path} exists but {manifest_path.name} does not, so its configuration "
                "is unknown. Pass a new --out directory."
            )
        return None, []
    manifest = read_json(manifest_path)
    check_resume(manifest, config, out_dir)
    repair_samples(samples_path)
    records = read_samples(samples_path)
    check_unique(records, samples_path)
    stray = [r.key for r in records if r.key not in planned_keys]
    if stray:
        task, sample_id = stray[0]
        raise RunDirError(
            f"{samples_path} holds {len(stray)} sample(s) this run does not plan, e.g. "
            f"{sample_id!r} of task {task!r}: the task's data changed since the run began. "
            "Pass a new --out directory."
        )
    return manifest, records


def run_evaluation(
    open_engine: Callable[[EngineSettings], Engine],
    tasks: Sequence[Task],
    out_dir: Path,
    *,
    preset: Preset,
    options: RunOptions,
    stop: StopFlag | None = None,
    monitor: Callable[[Path], PhaseMonitor] | None = None,
    progress: Callable[[int, int], Progress] = Progress,
) -> RunResult:
    """Evaluate `tasks` into `out_dir`, resuming whatever it already holds.

    `open_engine(settings)` is called at most once, and only if samples remain; `settings` are
    `options.engine` with `min_model_len` filled in from the tasks unless set.
    `monitor(metrics_csv)` starts a sampler for this attempt. `progress(total, done)` builds the
    progress display.
    Raises ResumeMismatchError if `out_dir` belongs to another configuration.
    """
    if not tasks:
        raise ConfigError("No tasks selected: name at least one category or task.")
    out_dir.mkdir(parents=True, exist_ok=True)
    work = [(task, select_samples(task, options)) for task in tasks]
    if options.engine.min_model_len is None:
        settings = dataclasses.replace(options.engine, min_model_len=needed_model_len(work))
        options = dataclasses.replace(options, engine=settings)
    config = run_config(preset, tasks, options)
    planned = [{"task": t.name, "category": t.category, "n_total": len(s)} for t, s in work]
    planned_keys = {(t.name, s.id) for t, samples in work for s in samples}
    manifest, records = _load_existing(out_dir, config, planned_keys)
    if manifest is None:
        manifest = _new_manifest(out_dir, preset, config, planned)
    # What this attempt runs with: the fingerprint matched, but the engine layout may differ,
    # and a merged directory resumed unsharded owes more than its shards planned.
    manifest["config"] = config
    manifest["preset"] = json.loads(json.dumps(dataclasses.asdict(preset)))
    manifest["samples_planned"] = planned
    done = {r.key for r in records}
    pending = [(t, [s for s in samples if (t.name, s.id) not in done]) for t, samples in work]
    run = _Run(out_dir, manifest)
    if not any(samples for _, samples in pending):
        return RunResult(
            status="complete", run_dir=out_dir, summary=run.finish("complete", records)
        )

    run.begin_attempt()
    sampler = monitor(out_dir / METRICS) if monitor else None
    engine: Engine | None = None
    try:
        # A signal that came while starting up stops the run before it pays for a model load.
        if not _stopping(stop):
            _phase(sampler, "load")
            t0 = time.monotonic()
            engine = open_engine(options.engine)
            run.add_time("load", time.monotonic() - t0)
            run.manifest["versions"] = provenance.versions()  # the engine may have imported torch
            run.note_engine(engine)
            run.save()
            bar = progress(len(planned_keys), len(done))
            for task, samples in pending:
                for chunk in _chunks(samples, options.chunk_size):
                    if _stopping(stop):
                        break
                    new = _run_chunk(engine, task, chunk, options, run, sampler)
                    append_samples(out_dir / SAMPLES, new)
                    records.extend(new)
                    bar.advance(len(new), sum(sum(r.completion_tokens) for r in new))
                    run.note_engine(engine)
                    run.save()
            bar.close()
    except BaseException as exc:
        status = "failed" if isinstance(exc, Exception) else "interrupted"
        _close(engine, sampler, run)
        run.finish(status, records, error=f"{type(exc).__name__}: {exc}")
        raise
    _close(engine, sampler, run)
    status = "complete" if len(records) == len(planned_keys) else "interrupted"
    return RunResult(status=status, run_dir=out_dir, summary=run.finish(status, records))


def _stopping(stop: StopFlag | None) -> bool:
    return stop is not None and stop.requested is not None


def _phase(sampler: PhaseMonitor | None, name: str) -> None:
    if sampler is not None:
        sampler.set_phase(name)


def _close(engine: Engine | None, sampler: PhaseMonitor | None, run: _Run) -> None:
    if engine is not None:
        engine.close()
    if sampler is not None:
        run.manifest["devices"] = sampler.stop()


def _run_chunk(
    engine: Engine,
    task: Task,
    chunk: Sequence[Sample],
    options: RunOptions,
    run: _Run,
    sampler: PhaseMonitor | None,
) -> list[SampleRecord]:
    _phase(sampler, f"generate:{task.category}")
    t0 = time.monotonic()
    generations = _answers(engine, task, chunk)
    run.add_time(f"generate:{task.category}", time.monotonic() - t0)
    if len(generations) != len(chunk):
        raise EngineError(
            f"The engine returned {len(generations)} generations for {len(chunk)} prompts "
            f"of task {task.name!r}; it must return one per prompt, in order."
        )
    _phase(sampler, f"score:{task.category}")
    t0 = time.monotonic()
    scores = task.score_many([(s, g.texts) for s, g in zip(chunk, generations, strict=True)])
    records = []
    for sample, generation, scored in zip(chunk, generations, scores, strict=True):
        records.append(
            SampleRecord(
                task=task.name,
                category=task.category,
                sample_id=sample.id,
                prompt=sample.prompt,
                completions=generation.texts,
                extracted=scored.extracted,
                scores=scored.scores,
                prompt_tokens=generation.prompt_tokens,
                completion_tokens=generation.completion_tokens,
                option_logprobs=generation.option_logprobs,
                shard=options.shard.index if options.shard else None,
            )
        )
    run.add_time(f"score:{task.category}", time.monotonic() - t0)
    return records


def _answers(engine: Engine, task: Task, chunk: Sequence[Sample]) -> list[Generation]:
    """Generated completions, or for samples with options the most likely option."""
    if not any(s.options for s in chunk):
        return engine.generate([s.prompt for s in chunk], task.sampling)
    if not all(s.options for s in chunk):
        raise ConfigError(
            f"Task {task.name!r} mixes samples with and without options; a task either "
            "generates or ranks options by log-probability."
        )
    requests = [(s.prompt, option.continuation) for s in chunk for option in s.options]
    scored = engine.loglikelihoods(requests)
    if len(scored) != len(requests):
        raise EngineError(
            f"The engine returned {len(scored)} log-likelihoods for {len(requests)} options "
            f"of task {task.name!r}; it must return one per option, in order."
        )
    out, start = [], 0
    for sample in chunk:
        mine = scored[start : start + len(sample.options)]
        start += len(sample.options)
        logprobs = tuple(x.logprob for x in mine)
        # Per byte of the continuation (lm-eval's acc_norm), so longer option texts are not
        # penalised for their length; letters all have one length, so they rank by logprob.
        sizes = [len(o.continuation.encode()) for o in sample.options]
        per_byte = [lp / size for lp, size in zip(logprobs, sizes, strict=True)]
        best = max(range(len(per_byte)), key=per_byte.__getitem__)  # ties: the first option
        out.append(
            Generation(
                texts=(sample.options[best].answer,),
                prompt_tokens=mine[0].prompt_tokens,
                completion_tokens=(0,),  # nothing generated
                option_logprobs=logprobs,
            )
        )
    return out
