"""Run tasks through an engine into a run directory, resumably (orchestration only).

Order of work: check the directory against the configuration (before paying for a model load),
load the engine once, then stream every pending sample through it (evalpipe.run.stream): the
engine's queue is kept full across task boundaries, each finished sample is scored and appended
to samples.jsonl at once, and a stop signal aborts what is in flight. The manifest is rewritten
every few seconds, so timings survive a kill.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evalpipe.catalog.pilot import PilotSize
from evalpipe.catalog.preset import Preset
from evalpipe.core import exitcodes, provenance
from evalpipe.core.configio import first_repeat
from evalpipe.core.errors import ConfigError, RunDirError, StorageError
from evalpipe.core.isolation import IsolationLevel
from evalpipe.engine.factory import check_backend
from evalpipe.engine.protocol import Engine, EngineSettings, Slots
from evalpipe.estimate.lengths import PastLengths
from evalpipe.monitor.devicesummary import DeviceSummary
from evalpipe.records.episode import Step
from evalpipe.run import episodes
from evalpipe.run.admission import POLICIES, Policy, admission_order, length_model
from evalpipe.run.diagnostics import write_stall_report
from evalpipe.run.kindfiles import write_run_results
from evalpipe.run.pilotprobe import probed
from evalpipe.run.pilotrun import pilot_record, pilot_samples, shard_seed
from evalpipe.run.progress import Progress
from evalpipe.run.stream import Hooks, Item, run_stream
from evalpipe.run.tracking import Tracking
from evalpipe.run.watchdog import Stall, Watchdog, end_process
from evalpipe.rundir.checkpoint import check_resume
from evalpipe.rundir.jsonlog import JsonlLog
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.lock import RunLock
from evalpipe.rundir.manifest import (
    Attempt,
    Manifest,
    PlannedTask,
    RunStatus,
    TrackedRun,
    UserSimulator,
    read_manifest,
    write_manifest,
)
from evalpipe.rundir.runconfig import RunConfig
from evalpipe.rundir.samplelog import (
    SampleLog,
    SampleRecord,
    check_unique,
    read_samples,
    repair_samples,
    salvage_samples,
    write_samples,
)
from evalpipe.rundir.shard import Shard
from evalpipe.rundir.steps import StepRecord, stored_steps
from evalpipe.rundir.submission import read_plan
from evalpipe.rundir.summary import Summary, summarize_run, write_summary
from evalpipe.rundir.timings import LOAD, PROBE, phase
from evalpipe.rundir.tracked import sample_rows, tracked_metrics, tracked_params
from evalpipe.rundir.turns import TurnRecord, stored_answers
from evalpipe.sandbox.pool import require_isolation
from evalpipe.tasks.base import Sample, Task, check_limit, gives_tools, kept_whole, runs_code
from evalpipe.tasks.bounds import needed_model_len
from evalpipe.tasks.packages import check_sources, sources_of, task_packages
from evalpipe.tasks.pilotdraw import draw

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What to run: everything in here except `engine`, `replicas` and `window` is
    fingerprinted (a run resumes under another layout)."""

    backend: str
    engine: EngineSettings = field(default_factory=EngineSettings)
    categories: tuple[str, ...] | None = None
    limit: int | None = None
    shard: Shard | None = None
    replicas: int = 1
    # Requests kept in flight per engine; None: the engine's own capacity (2 × max_num_seqs).
    window: int | None = None
    # Fixed request order, window and seeds on one engine, and batch-invariant kernels where
    # the engine has them (docs/runner.md says what each platform promises).
    deterministic: bool = False
    # The order samples are admitted in (evalpipe.run.admission); None: longest first where
    # past runs predict lengths. Not fingerprinted: it changes when samples run, not what.
    admission: Policy | None = None
    # Refuse, rather than warn about, a package the tasks read from at another version than
    # evalpipe's pin (evalpipe.tasks.packages). Not fingerprinted: the versions themselves are.
    strict_versions: bool = False
    # The weakest sandbox isolation code tasks may be scored under (--sandbox). Not
    # fingerprinted: it allows a run, it does not change it.
    sandbox: IsolationLevel = "full"
    # The user simulator of agent tasks' episodes (None: none): its model and sampling are
    # fingerprinted (they shape the episodes), where it ran is not.
    user_sim: UserSimulator | None = None
    # A pilot (--pilot, catalog/pilot.py): a seeded draw of each task's samples, written where
    # the full run resumes them. Not fingerprinted: the full run continues the same directory.
    pilot: str | None = None
    pilot_seed: int = 0

    def __post_init__(self) -> None:
        check_backend(self.backend)
        if self.pilot is not None:
            PilotSize.parse(self.pilot)
            if self.shard is not None:
                raise ConfigError(
                    f"--pilot runs one job over a sample of every task, not shard {self.shard}: "
                    "drop --shard (the full run after the pilot may be sharded)."
                )
        if self.admission is not None and self.admission not in POLICIES:
            raise ConfigError(
                f"admission {self.admission!r} is not one of {', '.join(POLICIES)}; leave it "
                "unset for longest first where past runs predict lengths."
            )
        check_limit(self.limit)
        if self.replicas < 1:
            raise ConfigError(f"replicas must be ≥ 1, got {self.replicas}.")
        if self.window is not None and self.window < 1:
            raise ConfigError(f"the admission window must be ≥ 1 request, got {self.window}.")
        if self.backend == "openai" and self.replicas > 1:
            raise ConfigError(
                f"The openai backend is one client of a server, not {self.replicas} replicas: "
                "the server runs its own replicas. Drop --replicas; raise --concurrency to "
                "keep more requests in flight."
            )
        if self.deterministic and self.replicas > 1:
            raise ConfigError(
                f"--deterministic runs one engine, not {self.replicas} replicas: which replica "
                "(and which batch) a sample lands in depends on timing. Pass --replicas 1."
            )


class PhaseMonitor(Protocol):
    """The GPU/CPU sampler as the runner uses it (evalpipe.monitor.Monitor, started).

    stop() returns per-device summaries covering every attempt of the run (the monitor resumes
    its metrics.csv), so the runner stores the latest ones rather than adding them up."""

    def set_phase(self, name: str) -> None: ...

    def stop(self) -> list[DeviceSummary]: ...


class StopFlag(Protocol):
    requested: str | None


@dataclass(frozen=True, kw_only=True)
class GenerationResult:
    status: RunStatus  # "complete" or "interrupted"
    run_dir: Path
    summary: Summary  # summary.json as written
    n_done: int  # samples finished, of
    n_total: int  # the samples the run planned

    @property
    def exit_status(self) -> int:
        return exitcodes.OK if self.status == "complete" else exitcodes.RESUMABLE


def run_config(preset: Preset, tasks: Sequence[Task], options: RunOptions) -> RunConfig:
    """The manifest's `config`, built from JSON-round-tripped values so that it fingerprints
    like a stored one."""
    packages = check_sources(sources_of(tasks)).versions
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
        "sampling": {t.name: t.sampling.to_dict() for t in tasks},
        # Not fingerprinted: a run resumes under another layout (runconfig.UNHASHED).
        "engine": dataclasses.asdict(options.engine) | {"replicas": options.replicas},
    }
    if preset.tool_parser is not None and any(gives_tools(t) for t in tasks):
        # Absent otherwise: it reads the calls of requests with tools only.
        config["model"]["tool_parser"] = preset.tool_parser
    if options.user_sim is not None:  # absent otherwise: runs without agents keep their print
        simulated = options.user_sim
        config["user_sim"] = {"model": simulated.model, "sampling": simulated.sampling}
    if options.deterministic:  # absent otherwise: runs made before the mode existed resume
        config["deterministic"] = True
    if packages:  # absent otherwise: runs of tasks that read no package keep their fingerprint
        config["packages"] = packages
    return RunConfig.from_dict(json.loads(json.dumps(config)))


def select_samples(task: Task, options: RunOptions) -> list[Sample]:
    """The samples this run owes for `task`: the limit first, then the pilot's draw or the
    shard's slice."""
    samples = task.samples(options.limit)
    repeated = first_repeat(sample.id for sample in samples)
    if repeated is not None:
        raise ConfigError(
            f"Task {task.name!r} yields sample id {repeated!r} twice; sample ids must be "
            "unique so that resume and merge can key on them."
        )
    why = kept_whole(task)
    if why is not None and (options.pilot is not None or options.shard):
        split = "--pilot" if options.pilot is not None else f"--shard {options.shard}"
        raise ConfigError(
            f"Task {task.name!r} cannot run under {split}: {why}. Run it whole, in a run "
            f"without {split.split()[0]} (the other tasks may keep it)."
        )
    if options.pilot is not None:
        size = PilotSize.parse(options.pilot).samples(task.name, len(samples))
        return draw(samples, size, seed=options.pilot_seed, task=task.name)
    return options.shard.select(samples) if options.shard else samples


class _Run:
    """One attempt at a run directory: owns the manifest and rewrites it as work proceeds."""

    def __init__(self, out_dir: Path, manifest: Manifest, tasks: Sequence[Task] = ()) -> None:
        self.files = RunDir(out_dir)
        self.manifest = manifest
        self.tasks = tasks
        self.started = time.monotonic()
        self.attempt: Attempt | None = None
        self.tracking: Tracking | None = None

    def begin_attempt(self) -> None:
        self.attempt = Attempt(
            started_at=provenance.utc_now(),
            host=provenance.host(),
            slurm=provenance.slurm_ids(),
            git_sha=provenance.git_sha(),
        )
        self.manifest.begin(self.attempt)
        self.save()

    def add_time(self, phase: str, seconds: float) -> None:
        self.manifest.add_time(phase, seconds)

    def note_engine(self, engine: Engine) -> None:
        """Record the engine's effective settings and OOM fallback steps (they can change while
        it generates)."""
        self.manifest.engine = engine.describe()
        for step in engine.fallback_steps:
            if step not in self.manifest.oom_fallback:
                self.manifest.oom_fallback.append(step)

    def save(self) -> None:
        if self.attempt is not None:
            self.attempt.wall_s = round(time.monotonic() - self.started, 3)
        if self.tracking is not None and self.tracking.tracked is not None:
            self.manifest.tracking = self.tracking.tracked
        write_manifest(self.files, self.manifest)

    def stalled(
        self, stall: Stall, records: list[SampleRecord], sampler: PhaseMonitor | None
    ) -> Path:
        """On the watchdog's thread: write the diagnostics, stop the monitor, checkpoint (the
        finished samples are on disk already) and mark the attempt interrupted; the report."""
        slurm = provenance.slurm_ids()
        report = self.files.stall_report(slurm, len(self.manifest.attempts))
        write_stall_report(report, stall, self.files, slurm)
        if sampler is not None:
            self.manifest.devices = sampler.stop()
        error = f"stalled: {stall.describe()}; diagnostics in {report}"
        self.finish("interrupted", list(records), error=error)
        return report

    def finish(
        self, status: RunStatus, records: list[SampleRecord], error: str | None = None
    ) -> Summary:
        now = provenance.utc_now()
        if self.attempt is not None:
            self.attempt.status = status
            self.attempt.finished_at = now
        self.manifest.status = status
        self.manifest.finished_at = now
        self.manifest.error = error
        self.save()
        summary = summarize_run(records, self.manifest)
        write_summary(self.files, summary)
        if status == "complete":
            write_run_results(self.files, self.tasks, records)
        self._end_tracking(summary, records, status)
        return summary

    def _end_tracking(
        self, summary: Summary, records: list[SampleRecord], status: RunStatus
    ) -> None:
        """The tracked run's final figures and samples table (waits at most a few seconds);
        the manifest learns the tracked run's id if it came late."""
        tracking, self.tracking = self.tracking, None
        if tracking is None:
            return
        metrics = tracked_metrics(summary)
        tracking.end(metrics, sample_rows(records), status=status)
        if tracking.tracked is not None and tracking.tracked != self.manifest.tracking:
            self.manifest.tracking = tracking.tracked
            write_manifest(self.files, self.manifest)


def _new_manifest(
    out_dir: Path, preset: Preset, config: RunConfig, planned: list[PlannedTask]
) -> Manifest:
    return Manifest(
        run_id=out_dir.name,
        status="running",
        plan=read_plan(RunDir(out_dir)),  # written beside the run by `evalpipe submit`
        config=config,
        config_hash=config.fingerprint(),
        versions=_versions(config),
        git_sha=provenance.git_sha(),
        slurm=provenance.slurm_ids(),
        seed=preset.seed,
        started_at=provenance.utc_now(),
        samples_planned=planned,
    )


def _versions(config: RunConfig) -> dict[str, str | None]:
    """The manifest's `versions`: evalpipe's stack, and the packages the tasks read from."""
    return provenance.versions() | config.packages


def _load_existing(
    out_dir: Path, config: RunConfig, planned_keys: set[tuple[str, str]]
) -> tuple[Manifest | None, list[SampleRecord]]:
    """The directory's manifest (None if new) and its finished samples, after checking both."""
    samples_path = RunDir(out_dir).samples
    manifest = read_manifest(RunDir(out_dir))
    if manifest is None:
        if samples_path.exists():
            raise RunDirError(
                f"{samples_path} exists but {RunDir(out_dir).manifest.name} does not, so its "
                "configuration is unknown. Pass a new --out directory."
            )
        return None, []
    check_resume(manifest, config, out_dir)
    repair_samples(samples_path)
    damaged = salvage_samples(samples_path, RunDir(out_dir).damaged)
    if damaged:
        log.warning(
            "%d damaged line(s) in %s were moved to %s; their samples run again.",
            damaged,
            samples_path,
            RunDir(out_dir).damaged.name,
        )
    records = read_samples(samples_path).records  # damaged lines were moved aside just now
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
    watchdog: Callable[[Callable[[Stall], None]], Watchdog] | None = None,
    exit_process: Callable[[int], None] = end_process,
    past: Sequence[PastLengths] = (),
    tracker: Callable[[Path, TrackedRun | None], Tracking] | None = None,
) -> GenerationResult:
    """Evaluate `tasks` into `out_dir`, resuming whatever it already holds.

    `open_engine(settings)` is called at most once, and only if samples remain; `settings` are
    `options.engine` with `min_model_len` filled in from the tasks unless set.
    `monitor(metrics_csv)` starts a sampler for this attempt. `progress(total, done)` builds the
    progress display. `watchdog(on_stall)` starts a stall watchdog for this attempt; on a stall
    the run writes its diagnostics, checkpoints and calls `exit_process(exitcodes.STALL)` from
    the watchdog's thread. `past` holds earlier runs' completion lengths, which predict this
    run's for its admission order (evalpipe.run.admission). `tracker(out_dir, tracked_before)`
    builds this attempt's tracking phase (evalpipe.run.tracking), given the tracked run an
    earlier attempt started.
    Raises ResumeMismatchError if `out_dir` belongs to another configuration.
    """
    if not tasks:
        raise ConfigError("No tasks selected: name at least one category or task.")
    # The packages the tasks read from, then the samples: a task whose prompts or data cannot
    # be had fails before the directory exists, as does code that the sandbox could not run
    # with the isolation the user accepts.
    for warning in task_packages(tasks, strict=options.strict_versions).off_pin:
        log.warning("%s", warning)
    work = [(task, select_samples(task, options)) for task in tasks]
    isolation = sandbox_isolation(tasks, options.sandbox)
    out_dir.mkdir(parents=True, exist_ok=True)
    with RunLock(out_dir):  # one writer at a time: a second run, resume or merge is refused
        RunDir(out_dir).remove_leftovers()
        return _evaluate(
            open_engine,
            tasks,
            work,
            out_dir,
            preset,
            options,
            stop,
            monitor,
            progress,
            watchdog,
            exit_process,
            past,
            tracker,
            isolation,
        )


def sandbox_isolation(tasks: Sequence[Task], accept: IsolationLevel) -> IsolationLevel | None:
    """The sandbox's isolation level on this machine where a task runs code (None where none
    does); SandboxError, saying what is missing, where it is below `accept`."""
    if not any(runs_code(task) for task in tasks):
        return None
    return require_isolation(accept)


def _evaluate(
    open_engine: Callable[[EngineSettings], Engine],
    tasks: Sequence[Task],
    work: list[tuple[Task, list[Sample]]],
    out_dir: Path,
    preset: Preset,
    options: RunOptions,
    stop: StopFlag | None,
    monitor: Callable[[Path], PhaseMonitor] | None,
    progress: Callable[[int, int], Progress],
    watchdog: Callable[[Callable[[Stall], None]], Watchdog] | None,
    exit_process: Callable[[int], None],
    past: Sequence[PastLengths],
    tracker: Callable[[Path, TrackedRun | None], Tracking] | None,
    isolation: IsolationLevel | None,
) -> GenerationResult:
    if options.engine.min_model_len is None:
        settings = dataclasses.replace(options.engine, min_model_len=needed_model_len(work))
        options = dataclasses.replace(options, engine=settings)
    config = run_config(preset, tasks, options)
    planned = [PlannedTask(name=t.name, category=t.category, n_total=len(s)) for t, s in work]
    planned_keys = {(t.name, s.id) for t, samples in work for s in samples}
    manifest, records = _load_existing(out_dir, config, planned_keys)
    if manifest is None:
        manifest = _new_manifest(out_dir, preset, config, planned)
        records = shard_seed(out_dir, config, planned_keys)
        if records:  # the pilot's samples in this shard's slice: resumed, not generated
            write_manifest(RunDir(out_dir), manifest)
            write_samples(RunDir(out_dir).samples, records)
    if options.pilot is not None:
        populations = [len(task.samples(options.limit)) for task, _ in work]
        manifest.pilot = pilot_record(options.pilot, options.pilot_seed, work, populations)
    elif manifest.pilot is not None and manifest.pilot.resumed is None:
        # The full run after a pilot: how many of the pilot's samples it resumed.
        manifest.pilot = manifest.pilot.with_resumed(pilot_samples(records, manifest.pilot))
    # What this attempt runs with: the fingerprint matched, but the engine layout may differ,
    # and a merged directory resumed unsharded owes more than its shards planned.
    manifest.config = config
    manifest.preset = json.loads(json.dumps(dataclasses.asdict(preset)))
    manifest.samples_planned = planned
    manifest.sandbox = isolation
    manifest.user_sim = options.user_sim
    done = {r.key for r in records}
    pending = [(t, [s for s in samples if (t.name, s.id) not in done]) for t, samples in work]
    run = _Run(out_dir, manifest, tasks)
    if not any(samples for _, samples in pending):
        if manifest.status != "complete":
            # Every sample is on disk but the attempt that wrote them died before finishing:
            # this attempt finishes the run (and marks that one lost).
            run.begin_attempt()
        return GenerationResult(
            status="complete",
            run_dir=out_dir,
            summary=run.finish("complete", records),
            n_done=len(records),
            n_total=len(planned_keys),
        )

    run.begin_attempt()
    sampler = monitor(RunDir(out_dir).metrics) if monitor else None
    if tracker is not None:
        run.tracking = tracker(out_dir, manifest.tracking).start(tracked_params(manifest))

    hooks: _RunHooks | None = None

    def on_stall(stall: Stall) -> None:
        try:
            if hooks is not None:
                hooks.write_scored()  # finished and scored, but the stuck loop never wrote them
        except Exception:
            log.exception("Writing the scored samples failed; the report follows regardless.")
        report = run.stalled(stall, records, sampler)
        print(
            f"evalpipe run: stalled: {stall.describe()}. Diagnostics in {report}; the finished "
            f"samples are kept. Exiting with {exitcodes.STALL}.",
            file=sys.stderr,
            flush=True,
        )
        exit_process(exitcodes.STALL)

    guard = watchdog(on_stall) if watchdog else None
    engine: Engine | None = None
    try:
        # A signal that came while starting up stops the run before it pays for a model load.
        if not _stopping(stop):
            _phase(sampler, LOAD)
            t0 = time.monotonic()
            engine = open_engine(options.engine)
            if guard is not None:
                guard.phase("generate")
            run.add_time(LOAD, time.monotonic() - t0)
            run.manifest.versions = _versions(config)  # the engine may have imported torch
            run.note_engine(engine)
            run.save()
            # Multi-turn samples resume after their stored turns (turns.jsonl), episodes after
            # their stored steps (steps.jsonl).
            answered = stored_answers(RunDir(out_dir).turns)
            resolved = stored_steps(RunDir(out_dir).steps)
            _restore(tasks, resolved, done)
            items, run.manifest.admission = admission_order(
                [
                    Item(
                        task=t,
                        sample=s,
                        answers=answered.get((t.name, s.id), ())[: len(s.turns)],
                        steps=resolved.get((t.name, s.id), ()),
                    )
                    for t, samples in pending
                    for s in samples
                ],
                length_model(past, preset.name, options.backend),
                options.admission,
                deterministic=options.deterministic,
                room=engine.room(),
            )
            _warn_cache(run.manifest.admission)
            bar = progress(len(planned_keys), len(done))
            hooks = _RunHooks(run, engine, sampler, stop, bar, guard, len(done))
            with (
                SampleLog(RunDir(out_dir).samples) as log,
                JsonlLog(RunDir(out_dir).turns) as turns,
                JsonlLog(RunDir(out_dir).steps) as steps,
            ):

                def write(new: Sequence[SampleRecord]) -> None:
                    log.append(new)
                    records.extend(new)

                def write_turn(new: Sequence[TurnRecord]) -> None:
                    turns.append([t.to_dict() for t in new])

                def write_step(new: Sequence[StepRecord]) -> None:
                    steps.append([s.to_dict() for s in new])

                run_stream(
                    engine,
                    items,
                    write,
                    shard=options.shard.index if options.shard else None,
                    window=options.window * options.replicas if options.window else None,
                    hooks=hooks,
                    write_turn=write_turn,
                    write_step=write_step,
                )
            pilot = run.manifest.pilot
            if options.pilot is not None and pilot is not None and not _stopping(stop):
                t0 = time.monotonic()
                run.manifest.pilot = probed(engine, pilot, records, run.manifest.occupancy.steps)
                if run.manifest.pilot.probe is not None:
                    run.add_time(PROBE, time.monotonic() - t0)
            bar.close()
            run.note_engine(engine)
    except BaseException as exc:
        status = "failed" if isinstance(exc, Exception) else "interrupted"
        if guard is not None:
            guard.stop()
        _close(engine, sampler, run)
        try:
            run.finish(status, records, error=f"{type(exc).__name__}: {exc}")
        except StorageError:
            if not isinstance(exc, StorageError):
                raise
            # The file system refused the first write already: that is the error to report,
            # and the manifest on disk keeps its last complete state.
        raise
    if guard is not None:
        guard.stop()
    _close(engine, sampler, run)
    status = "complete" if len(records) == len(planned_keys) else "interrupted"
    return GenerationResult(
        status=status,
        run_dir=out_dir,
        summary=run.finish(status, records),
        n_done=len(records),
        n_total=len(planned_keys),
    )


# How often the manifest (timings, engine state) is rewritten while samples stream.
MANIFEST_SECONDS = 5.0


class _RunHooks(Hooks):
    """The streaming loop's reports, turned into timings, phases, progress and manifest saves.

    Called on the loop's thread only (see Hooks), so while samples stream the manifest has one
    writer: a save never serialises it while another thread adds a timing."""

    def __init__(
        self,
        run: _Run,
        engine: Engine,
        sampler: PhaseMonitor | None,
        stop: StopFlag | None,
        bar: Progress,
        guard: Watchdog | None,
        done: int,
    ) -> None:
        self._run = run
        self._engine = engine
        self._sampler = sampler
        self._stop = stop
        self._bar = bar
        self._guard = guard
        self.write_scored: Callable[[], None] = lambda: None
        self._phase = ""
        self._saved = time.monotonic()
        self._done = done  # samples written, for the tracker
        self._tokens = 0

    def stopping(self) -> bool:
        return _stopping(self._stop)

    def streaming(self, write_scored: Callable[[], None]) -> None:
        self.write_scored = write_scored

    def admitted(self, item: Item) -> None:
        name = phase("generate", item.task.category)
        if name != self._phase:
            self._phase = name
            _phase(self._sampler, name)

    def stepped(self, seconds: float, categories: Sequence[str]) -> None:
        # Categories in flight together share the step's time (their sum is the stream's wall).
        for category in categories:
            self._run.add_time(phase("generate", category), seconds / len(categories))
        self._progress("an engine step finished")

    def occupied(self, seconds: float, slots: Slots, admitted: bool) -> None:
        self._run.manifest.occupancy.add(
            seconds, slots.busy, slots.total, slots.preempted, admitted=admitted
        )

    def scored(self, category: str, seconds: float) -> None:
        self._run.add_time(phase("score", category), seconds)
        self._progress(f"{category} samples scored")

    def _progress(self, what: str) -> None:
        if self._guard is not None:
            self._guard.progress(what)

    def written(self, records: Sequence[SampleRecord]) -> None:
        self._progress("samples written")
        tokens = sum(sum(r.completion_tokens) for r in records)
        self._bar.advance(len(records), tokens)
        if self._run.tracking is not None:
            self._done += len(records)
            self._tokens += tokens
            self._run.tracking.progress(self._done, self._tokens)
        if time.monotonic() - self._saved >= MANIFEST_SECONDS:
            self._run.note_engine(self._engine)
            self._run.save()
            self._saved = time.monotonic()


def _warn_cache(admission: dict[str, Any]) -> None:
    """Longest first whose first samples outgrow the KV cache: vLLM will preempt some."""
    cache = admission.get("cache")
    if cache is None or cache["fits"]:
        return
    log.warning(
        "Longest-first admission: the %d longest predicted sequences need about %s KV cache "
        "tokens at their full lengths and the cache holds %s, so vLLM will preempt and "
        "recompute some of them. A larger cache, a lower max_num_seqs or --admission given "
        "avoids it (docs/runner.md, Admission order).",
        cache["slots"],
        f"{cache['longest_need_tokens']:,}",
        f"{cache['kv_tokens']:,}",
    )


def _stopping(stop: StopFlag | None) -> bool:
    return stop is not None and stop.requested is not None


def _phase(sampler: PhaseMonitor | None, name: str) -> None:
    if sampler is not None:
        sampler.set_phase(name)


def _restore(
    tasks: Sequence[Task],
    resolved: Mapping[tuple[str, str], Sequence[Step]],
    done: AbstractSet[tuple[str, str]],
) -> None:
    """Tell each task whose episodes wait for others (BFCL's memory questions) what the run
    recorded before: its samples' steps and which of them were written."""
    for task in tasks:
        if isinstance(task, episodes.Restores):
            steps = {sample: s for (name, sample), s in resolved.items() if name == task.name}
            task.restore(steps, {sample for name, sample in done if name == task.name})


def _close(engine: Engine | None, sampler: PhaseMonitor | None, run: _Run) -> None:
    if engine is not None:
        engine.close()
    if sampler is not None:
        run.manifest.devices = sampler.stop()
