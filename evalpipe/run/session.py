"""One evaluation from preset to run directory: `evalpipe.evaluate` and `evalpipe run` alike.

    import evalpipe
    result = evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=4)
    print(result)                      # per-task metrics with their 95 % intervals
    for record in result.samples(): ...

The session loads and fits the tasks, lays the model out on this machine, starts the engine,
the monitor and the watchdog, and runs a judged run's phases (the judge after generation in a
process of its own, or side by side); an existing run directory is resumed. Stop signals
(SIGUSR1, SIGTERM) checkpoint the run, which then ends `interrupted` (the CLI exits 75); another
call with the same `out` resumes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.taskrefs import names_judged
from evalpipe.catalog.weights import find_model
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError
from evalpipe.core.options import names, record_from, to_argv
from evalpipe.engine.factory import open_engine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.estimate.lengths import load_lengths
from evalpipe.monitor import Monitor
from evalpipe.run.judgephase import judge_for, judge_run, read_baseline
from evalpipe.run.judgeprocess import JudgeBeside, beside_gpus, generation_open, wait_child
from evalpipe.run.localplan import LocalLayout, plan_local, visible_gpus
from evalpipe.run.replicas import ReplicaPool
from evalpipe.run.runner import (
    GenerationResult,
    RunOptions,
    StopFlag,
    run_evaluation,
    select_samples,
)
from evalpipe.run.runoptions import RunnerOptions
from evalpipe.run.trackdir import end_judging, track_judging
from evalpipe.run.trackers import BACKENDS
from evalpipe.run.tracking import Tracking, exit_wait_s
from evalpipe.run.usersim import (
    check_user_sim,
    open_user_sim,
    served_user_sim,
    user_sim_record,
    with_user_sim,
)
from evalpipe.run.watchdog import Watchdog, stall_limits
from evalpipe.rundir.checkpoint import StopOnSignal
from evalpipe.rundir.judgments import JudgeDir, judge_dirs
from evalpipe.rundir.layout import MANIFEST, RunDir, new_run_dir
from evalpipe.rundir.samplelog import SampleRecord, read_samples
from evalpipe.rundir.summary import Summary, TaskSummary, read_summary
from evalpipe.rundir.sweep import run_sweep
from evalpipe.rundir.tracked import tracking_group
from evalpipe.sandbox.pool import require_isolation
from evalpipe.tasks.base import Task
from evalpipe.tasks.kindbase import LoadOptions
from evalpipe.tasks.kinds import FittedTasks, load_selection

RESULTS = Path("results")  # where a run without `out` gets its directory
# complete; interrupted: stopped at a checkpoint (exit 75), resumable; failed: a phase's
# process failed (its own error printed), or stalled (exit 124)
Status = Literal["complete", "interrupted", "failed"]


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What an evaluation left: its run directory and status, read back from the directory."""

    run_dir: Path
    status: Status
    exit_status: int  # what `evalpipe run` exits with (evalpipe.core.exitcodes)
    # summary.json (None before generation wrote one, e.g. after `phase="judge"`)
    summary: Summary | None
    # This process's judge phase (phase="judge"); the judgments of every judge: `judgments()`
    judged: JudgeDir | None = None
    # The phases ran as child processes, which printed their own summaries
    phases_apart: bool = False

    @property
    def tasks(self) -> dict[str, TaskSummary]:
        """Per task, its metrics: mean, standard error, n and the 95 % interval."""
        return {} if self.summary is None else dict(self.summary.tasks)

    def samples(self) -> Iterator[SampleRecord]:
        """The run's sample records (samples.jsonl through its one reader)."""
        yield from read_samples(RunDir(self.run_dir).samples).records

    def judgments(self) -> Iterator[tuple[JudgeDir, SampleRecord]]:
        """Every judge's judgments of this run's answers, with the judge's folder."""
        for folder in judge_dirs(RunDir(self.run_dir)):
            for record in read_samples(folder.judgments).records:
                yield folder, record

    def __str__(self) -> str:
        lines = [f"RunResult({self.status}, {self.run_dir})"]
        for task, info in self.tasks.items():
            for metric, m in info.metrics.items():
                interval = (
                    f" [{m.ci_low:.4f}, {m.ci_high:.4f}]"
                    if m.ci_low is not None and m.ci_high is not None
                    else ""
                )
                mean = "-" if m.mean is None else f"{m.mean:.4f}"
                n = "" if m.n is None else f" (n={m.n:g})"
                lines.append(f"  {task} {metric}: {mean}{interval}{n}")
        return "\n".join(lines)


def evaluate(
    preset: str | Path | Preset,
    tasks: Sequence[str] | str | None = None,
    limit: int | None = None,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    stop: StopFlag | None = None,
    **options: Any,
) -> RunResult:
    """Evaluate `preset` (a registry name, a preset YAML path or a `Preset`) on `tasks` (names,
    task files, suite:NAME; None: the preset's categories) into `out` (None: a new directory
    under results/), resuming `out` when it holds a run; `resume=True` insists that it does.

    `options` are `evalpipe run`'s options by their flag's name (`backend="fake"`,
    `deterministic=True`, `judge_base_url=...`); an unknown one is refused, listing them.
    `stop`: an object whose `requested` attribute, once not None, stops the run at a
    checkpoint; without it, SIGUSR1 and SIGTERM do when called from the main thread."""
    values = {name: tuple(v) if isinstance(v, list) else v for name, v in options.items()}
    if tasks is not None:
        values["tasks"] = names(tasks) if isinstance(tasks, str) else tuple(tasks)
    if limit is not None:
        values["limit"] = limit
    given = record_from(RunnerOptions, values)
    return run_session(preset, given, out=None if out is None else Path(out), resume=resume,
                       stop=stop)  # fmt: skip


def run_session(
    preset: str | Path | Preset,
    given: RunnerOptions,
    *,
    out: Path | None,
    resume: bool = False,
    stop: StopFlag | None = None,
) -> RunResult:
    """`evaluate` with the options as their record (the command line's way in)."""
    with _stopping(stop) as flag:
        if isinstance(preset, Preset):
            loaded, ref = preset, None
        else:
            loaded, ref = load_preset(str(preset)), str(preset)
        model = given.model_preset(loaded)
        if resume and out is None:
            raise ConfigError("--resume needs --out DIR naming the run directory to resume.")
        if resume and out is not None and not (out / MANIFEST).is_file():
            raise ConfigError(
                f"--resume: {out} holds no {MANIFEST}, so there is no run to resume. "
                "Drop --resume to start a new run there."
            )
        session = _Session(preset=model, ref=ref, given=given, stop=flag)
        return session.run(out or new_run_dir(RESULTS, model.name))


def sweep(
    presets: Sequence[str],
    given: RunnerOptions,
    folder: Path,
    *,
    on_result: Callable[[RunResult], None],
    leaderboard: Callable[[Path], object],
    resume: bool = False,
) -> int:
    """Several presets, one run directory each under `folder` (evalpipe/rundir/sweep.py);
    `on_result` sees each finished run. The exit status: 0, 75 when stopped, 1 when one
    failed."""
    if given.runtime.shard is not None or resume:
        raise ConfigError(
            "--shard and --resume take one preset; a sweep resumes by rerunning the same command."
        )

    def run_one(preset: str, out: Path) -> int:
        result = run_session(preset, given, out=out)
        on_result(result)
        return result.exit_status

    return run_sweep(presets, folder, run_one, leaderboard=leaderboard)


@contextlib.contextmanager
def _stopping(stop: StopFlag | None) -> Iterator[StopFlag]:
    """The stop flag: the caller's, else SIGUSR1/SIGTERM handled from the start (a signal that
    arrives while tasks and the model load still ends in a checkpoint). Signal handlers can
    only be set from the main thread: elsewhere, a run without `stop` cannot be stopped."""
    if stop is not None:
        yield stop
    elif threading.current_thread() is threading.main_thread():
        with StopOnSignal() as flag:
            yield flag
    else:
        yield _NeverStop()


_STATUS: dict[int, Status] = {exitcodes.OK: "complete", exitcodes.RESUMABLE: "interrupted"}


@dataclass
class _NeverStop:
    requested: str | None = None


def _log_to_stderr() -> None:
    """Show evalpipe's own notes (monitor: NVML missing, devices watched) in the job log."""
    logger = logging.getLogger("evalpipe")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("evalpipe run: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _say(text: str) -> None:
    print(f"evalpipe run: {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True, kw_only=True)
class _Session:
    """One preset's run: the options, the preset as served, and the stop flag."""

    preset: Preset
    ref: str | None  # the preset as the phases' processes are told it (None: an object)
    given: RunnerOptions
    stop: StopFlag

    def run(self, out: Path) -> RunResult:
        given = self.given
        placement = self._placement(names_judged(given.selection.tasks or ()))
        if placement == "after":  # this process loads no task: each phase's process does
            return self._phases_apart(out)
        check_user_sim(given, self.preset)
        fitted = load_run_tasks(self.preset, given)
        tasks = list(fitted.tasks)
        judge_gpus = None
        if placement == "side-by-side" and given.engine.backend == "vllm":
            judge_gpus = self._split_gpus()
        layout = plan_local(
            self.preset,
            tp=given.layout.tp,
            pp=given.layout.pp,
            # A deterministic run is one engine unless asked otherwise (then refused, saying why).
            replicas=given.layout.replicas or (1 if given.engine.deterministic else None),
            max_model_len=fitted.context.max_model_len,
            # Neither the fake engine nor a remote server uses this machine's GPUs.
            gpus=[] if given.engine.backend in ("fake", "openai") else None,
        )
        agents = [t for t in tasks if fitted.ask(t).simulated_user]
        options = dataclasses.replace(
            self._run_options(layout, fitted.context.max_model_len),
            user_sim=user_sim_record(given, self.preset, agents),
        )
        _log_to_stderr()
        _say(f"run directory {out}")
        _say(self._where(layout))
        for note in fitted.notes:
            _say(note)
        if given.judge.phase == "judge":
            return self._judge(fitted, tasks, options, out)
        judging = None
        if placement == "side-by-side":
            _say("judging answers side by side as they are written")
            judging = JudgeBeside(self._phase_command(out, "judge"), gpus=judge_gpus)
        try:
            server_log = RunDir(out).logs / "user-sim-server.log"
            with served_user_sim(given, self.preset, server_log) as served:
                result = self._generate(layout, tasks, options, out, served)
        except BaseException:
            if judging is not None:  # the judge checkpoints what it has
                judging.finish(lambda: "SIGTERM")
            raise
        status = result.exit_status
        if judging is not None:  # within the stop handler: a stop while it judges is passed on
            judge_status = judging.finish(lambda: self.stop.requested)
            status = status if result.status != "complete" else judge_status
        return RunResult(run_dir=out, status=result.status, exit_status=status,
                         summary=result.summary)  # fmt: skip

    def _run_options(self, layout: LocalLayout, max_model_len: int | None) -> RunOptions:
        given = self.given
        settings = EngineSettings(
            tensor_parallel_size=layout.tp,
            pipeline_parallel_size=layout.pp,
            max_model_len=max_model_len,
            distributed_executor_backend=given.layout.distributed_executor_backend,
            oom_fallback=not given.engine.no_oom_fallback,
            deterministic=given.engine.deterministic,
        )
        return RunOptions(
            backend=given.engine.backend,
            engine=settings,
            categories=given.selection.categories_for(self.preset.categories),
            limit=given.selection.limit,
            pilot=given.selection.pilot,
            pilot_seed=given.selection.pilot_seed or 0,
            shard=given.runtime.shard,
            replicas=layout.replicas,
            window=given.engine.window,
            deterministic=given.engine.deterministic,
            admission=given.engine.admission,
            strict_versions=given.runtime.strict_versions,
            sandbox=given.runtime.sandbox or "full",
        )

    def _where(self, layout: LocalLayout) -> str:
        if self.given.engine.backend == "openai":
            endpoint = self.preset.endpoint
            return f"the server at {endpoint.base_url}, {endpoint.concurrency} requests in flight"
        notes = "".join(f"\n  note: {n}" for n in layout.notes)
        return (
            f"TP={layout.tp} × PP={layout.pp}, {layout.replicas} replica(s) on {layout.device}"
            + notes
        )

    def _generate(
        self,
        layout: LocalLayout,
        tasks: list[Task],
        options: RunOptions,
        out: Path,
        given: RunnerOptions,
    ) -> GenerationResult:
        """The generation, `given` with the user simulator's server where one was started."""
        preset = self.preset

        def start(settings: EngineSettings):
            if not layout.envs:  # one replica: the engine runs in this process
                engine = open_engine(given.engine.backend, preset, settings)
            else:
                engine = ReplicaPool.start(given.engine.backend, preset, settings, layout.envs)
            return with_user_sim(engine, open_user_sim(given, preset))

        # Past runs in results/ and beside this one (not the whole working directory) predict
        # its completion lengths.
        beside = [] if out.parent.resolve() == Path.cwd().resolve() else [out.parent]
        past = (
            load_lengths([RESULTS, *beside], exclude=out)
            if given.engine.admission != "given"
            else []
        )
        limits = stall_limits(preset, given.runtime.stall_timeout)
        # In a multi-node job (vLLM over Ray, or a server whose Ray workers run there) the
        # other nodes' monitors follow this one's phase and clock, and its summary adds their
        # devices. A Ray run outside SLURM publishes too: a hand-started follower can use it.
        nodes = os.environ.get("SLURM_JOB_NUM_NODES", "1")
        spans_nodes = given.layout.distributed_executor_backend == "ray" or (
            nodes.isdigit() and int(nodes) > 1
        )
        files = RunDir(out)
        interval = (
            {}
            if given.runtime.monitor_interval is None
            else {"interval_s": given.runtime.monitor_interval}
        )
        return run_evaluation(
            start,
            tasks,
            out,
            preset=preset,
            options=options,
            stop=self.stop,
            monitor=lambda csv: Monitor(
                csv,
                publish_phase=files.phase_file if spans_nodes else None,
                node_csvs=files.node_metrics_files,
                **interval,
            ).start(),
            watchdog=(lambda on_stall: Watchdog(limits, on_stall).start()) if limits else None,
            tracker=_tracker(given.tracking.track),
            past=past,
        )

    def _placement(self, judged_tasks: bool) -> str | None:
        """Where this call's judge runs: "after" generation (each phase a process of its own)
        or "side-by-side"; None when it runs one phase, or judges nothing."""
        judge = self.given.judge
        if not judged_tasks or not judge.named or judge.phase is not None:
            return None
        return "side-by-side" if judge.placement == "side-by-side" else "after"

    def _phase_command(self, out: Path, phase: str) -> list[str]:
        """`evalpipe run` for one phase of a judged run, with this run's options."""
        if self.ref is None:
            raise ConfigError(
                f"A judged run runs its phases as processes of their own, which need the preset "
                f"by name or file: pass preset={self.preset.name!r}'s YAML path instead of the "
                "Preset object, or phase='generate' and then phase='judge'."
            )
        given = dataclasses.replace(
            self.given, judge=dataclasses.replace(self.given.judge, phase=phase)
        )
        argv = [word for words in to_argv(given) for word in words]
        return [sys.executable, "-m", "evalpipe", "run", "--preset", self.ref, *argv,
                "--out", str(out)]  # fmt: skip

    def _phases_apart(self, out: Path) -> RunResult:
        """The judge after generation: each phase in a process of its own, the generation's
        gone (and its memory with it) before the judge's starts. A stop signal is passed on."""
        import subprocess

        def requested() -> str | None:
            return self.stop.requested

        _say("generating, then judging, each phase in a process of its own")
        status = wait_child(subprocess.Popen(self._phase_command(out, "generate")), requested)
        if status == exitcodes.OK and self.stop.requested is None:
            _say("judging the answers in a new process")
            judge = subprocess.Popen(self._phase_command(out, "judge"))
            status = wait_child(judge, requested)
        elif status == exitcodes.OK:
            status = exitcodes.RESUMABLE
        files = RunDir(out)
        return RunResult(
            run_dir=out,
            status=_STATUS.get(status, "failed"),
            exit_status=status,
            summary=read_summary(files),
            phases_apart=True,
        )

    def _split_gpus(self) -> list[str] | None:
        """Side by side on GPUs: this process keeps the model's share of the visible GPUs (its
        CUDA_VISIBLE_DEVICES narrowed before anything plans or loads); the judge's share comes
        back (None without GPUs: both processes share the CPU engine's cores)."""
        gpus = visible_gpus()
        if not gpus:
            return None
        asked, layout = self.given.judge, self.given.layout
        judge = load_preset(asked.preset) if asked.preset and not asked.endpoint.base_url else None
        model, judge_gpus = beside_gpus(
            gpus, judge, tp=layout.tp, pp=layout.pp, replicas=layout.replicas
        )
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(model)
        return judge_gpus

    def _judge(
        self,
        judged: FittedTasks,
        tasks: list[Task],
        options: RunOptions,
        out: Path,
    ) -> RunResult:
        """phase="judge": judge the answers stored in `out` (generating nothing)."""
        given = self.given
        if not judged.gradings or not given.judge.named:
            raise ConfigError(
                "--phase judge needs a judge (--judge PRESET or --judge-base-url URL) and judged "
                "tasks (`evalpipe tasks list` shows the kinds that need a judge)."
            )
        judge, start = judge_for(given, self.preset, judged.gradings, judged.published)
        work = [(t, select_samples(t, options)) for t in tasks if t.name in judged.gradings]
        tracking = None
        if given.tracking.track is not None:
            # The run's tracked run gains the judge's figures (at most the tracker's usual wait).
            tracking = track_judging(given.tracking.track, out, judge.definition())
        # Side by side, the generating process holds this one's standard input until it ends.
        generating = generation_open() if given.judge.placement == "side-by-side" else None
        result = judge_run(
            start,
            out,
            work,
            judge,
            stopping=lambda: self.stop.requested is not None,
            generating=generating,
        )
        if tracking is not None:
            end_judging(tracking, result)
        complete = result.status == "complete"
        files = RunDir(out)
        return RunResult(
            run_dir=out,
            status="complete" if complete else "interrupted",
            exit_status=exitcodes.OK if complete else exitcodes.RESUMABLE,
            summary=read_summary(files),
            judged=result.folder,
        )


def load_run_tasks(preset: Preset, given: RunnerOptions) -> FittedTasks:
    """The run's tasks, each loaded by its kind as the selection names them, configured for the
    model and their budgets fitted to its context; the judged ones with their gradings."""
    judge = given.judge
    if given.selection.allow_unsafe_code:  # lm-eval's code metrics are checked in the sandbox
        require_isolation(given.runtime.sandbox or "full")  # as they load
    return load_selection(
        given.selection.tasks,
        LoadOptions.selected(
            given.selection,
            preset,
            backend=given.engine.backend,
            judge_data=Path(judge.data) if judge.data else None,
            baseline=read_baseline(Path(judge.baseline)) if judge.baseline else None,
        ),
        max_tokens=given.selection.max_tokens,
        max_model_len=given.layout.max_model_len,
        generation_model=find_model(preset),
    )


def _tracker(name: str | None) -> Callable[[Path, Any], Tracking] | None:
    """The tracking phase's factory for --track NAME (None: the run is not tracked)."""
    if name is None:
        return None
    wait_s = exit_wait_s()
    return lambda out, previous: Tracking(
        BACKENDS[name],
        out,
        tracker=name,
        group=tracking_group(RunDir(out)),
        previous=previous,
        exit_wait_s=wait_s,
    )
