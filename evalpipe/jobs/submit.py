"""Plan → render → validate → submit → record: the Python API behind `evalpipe submit`.

    from evalpipe.jobs.submit import submit
    options = JobOptions(run=RunnerOptions(selection=Selection(limit=5)))
    job = submit("tiny_random", "local", options=options)
    status = job.wait()          # or job.state()
    print(job.job_id, job.run_dir, status.ok)

Only the SlurmClient touches the scheduler; pass FakeSlurm to see what would be run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from evalpipe.catalog import registry
from evalpipe.catalog.registry import slurm_minutes
from evalpipe.core.errors import ConfigError, EvalpipeError, RunDirError, SlurmError
from evalpipe.jobs import preflight, render
from evalpipe.jobs.executors import EXECUTORS
from evalpipe.jobs.jobspec import JobOptions, JobSpec, make_jobspec
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.results import new_run_dir, read_samples
from evalpipe.rundir.submission import Submission, read_submission, write_plan, write_submission
from evalpipe.rundir.sweep import SweepManifest, SweepRun, write_sweep
from evalpipe.slurm.client import UNKNOWN, Slurm, SlurmClient, TaskState, sbatch_argv

if TYPE_CHECKING:  # the estimate's modules load tasks: only when an estimate is made
    from evalpipe.estimate.autosize import Choice
    from evalpipe.estimate.cost import Estimate


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A job ready to submit: its spec and rendered scripts, nothing written yet, and its cost
    estimate (None with the reason in `no_estimate` where none could be made)."""

    spec: JobSpec
    script: str
    merge_script: str | None
    estimate: Estimate | None = None
    choice: Choice | None = None  # shards / time limit chosen from the estimate
    no_estimate: str | None = None

    def cost_text(self) -> str:
        """The estimate and the choice's reasoning, as printed before submitting."""
        if self.estimate is None:
            return f"estimate: none ({self.no_estimate})\n"
        text = self.estimate.describe()
        if self.choice is not None:
            text += "chosen:\n" + "".join(f"- {reason}\n" for reason in self.choice.reasons)
            text += (
                f"→ --shards {self.choice.shards} --replicas {self.choice.replicas} "
                f"--time {self.choice.time_limit}\n"
            )
        return text

    @property
    def run_dir(self) -> Path:
        return Path(self.spec.run_dir)

    def test_only_scripts(self) -> list[Path]:
        """The scripts a real submit validates with `sbatch --test-only` first (none when the
        cluster turns validation off)."""
        if not self.spec.cluster.test_only:
            return []
        files = RunDir(self.run_dir)
        return [files.job_script] + ([files.merge_script] if self.merge_script is not None else [])

    def argv(self, job_id: str = "<job id>") -> list[list[str]]:
        """The sbatch command lines, in order; the merge job's depends on the first's id."""
        argvs = [sbatch_argv(RunDir(self.run_dir).job_script)]
        if self.merge_script is not None:
            argvs.append(
                sbatch_argv(RunDir(self.run_dir).merge_script, dependency=f"afterany:{job_id}")
            )
        return argvs


def prepare(
    preset: str,
    cluster: str,
    options: JobOptions,
    run_dir: Path,
    *,
    results: Sequence[Path] | None = None,
) -> Prepared:
    """Load, plan and render one job. `preset`/`cluster` are registry names or YAML paths.

    The cost is estimated when `results` (the folders to calibrate on) is given or the options
    leave shards, replicas or the time limit to the estimate; then those are chosen first."""
    loaded = registry.load_preset(preset)
    site = registry.load_cluster(cluster)
    gpu = registry.get_gpu(site.gpu)
    # A preset given as a file must be found from the job's working directory too.
    ref = str(Path(preset).expanduser().resolve()) if registry.is_path(preset) else preset

    def spec_for(chosen: JobOptions) -> JobSpec:
        return make_jobspec(
            preset=loaded,
            preset_ref=ref,
            cluster=site,
            gpu=gpu,
            options=chosen,
            run_dir=str(run_dir.expanduser().resolve()),
        )

    spec = spec_for(options)
    cost = _cost(spec, gpu, options, results)
    if cost.choice is not None:
        spec = spec_for(
            dataclasses.replace(
                options,
                run=dataclasses.replace(
                    options.run,
                    layout=dataclasses.replace(options.run.layout, replicas=cost.choice.replicas),
                ),
                shards=cost.choice.shards,
                time=cost.choice.time_limit,
                target_wall=None,
            )
        )
    merge = render.render_merge(spec) if spec.options.shards > 1 else None
    return dataclasses.replace(cost, spec=spec, script=render.render_job(spec), merge_script=merge)


def _cost(
    spec: JobSpec, gpu: registry.Gpu, options: JobOptions, results: Sequence[Path] | None
) -> Prepared:
    """The estimate (and choice) for a first spec; a Prepared whose scripts are filled later."""
    blank = Prepared(spec=spec, script="", merge_script=None)
    if results is None and not options.auto_chosen:
        return blank
    run = spec.options.run
    if run.engine.backend != "vllm" or spec.options.smoke:
        return dataclasses.replace(
            blank, no_estimate=f"only vLLM runs are estimated, not {run.engine.backend}"
        )
    # Only here: the estimate loads the tasks, which `evalpipe render` without one never does.
    from evalpipe.estimate.predict import DEFAULT_RESULTS, predictor

    site = spec.cluster
    try:
        prediction = predictor(
            spec.preset,
            gpu,
            spec.plan,
            run.selection,
            results=list(results or [DEFAULT_RESULTS]),
            calibration_dirs=[Path(site.cache_dir)] if site.cache_dir else [],
        )
    except EvalpipeError as exc:
        if options.auto_chosen:
            raise
        return dataclasses.replace(blank, no_estimate=str(exc))
    if not options.auto_chosen:
        est = prediction.estimate(shards=spec.options.shards, replicas=spec.plan.replicas)
        return dataclasses.replace(blank, estimate=est)
    from evalpipe.estimate.autosize import Limit

    max_minutes = slurm_minutes(site.max_time) if site.max_time else None
    # A fixed time limit is what each shard must fit; an automatic one may grow to the site's
    # max_time (else the profile's default).
    if not options.auto_time:
        given = options.time or site.time_limit
        where = "--time" if options.time else f"cluster {site.name}'s time_limit"
        limit = Limit(minutes=slurm_minutes(given), source=where)
    elif site.max_time is not None:
        limit = Limit(
            minutes=slurm_minutes(site.max_time), source=f"cluster {site.name}'s max_time"
        )
    else:
        limit = Limit(
            minutes=slurm_minutes(site.time_limit), source=f"cluster {site.name}'s time_limit"
        )
    target = slurm_minutes(options.target_wall) * 60 if options.target_wall else None
    choice = prediction.choose(
        shards=None if options.auto_shards else options.shards,
        limit=limit,
        auto_time=options.auto_time,
        margin=options.margin,
        max_minutes=max_minutes,
        target_wall_s=target,
    )
    return dataclasses.replace(blank, estimate=choice.estimate, choice=choice)


@dataclass(frozen=True, kw_only=True)
class JobStatus:
    """Where a submitted run stands: its job or array tasks, and the merge job if any."""

    tasks: tuple[TaskState, ...]
    merge: TaskState | None = None
    samples_done: int = 0

    @property
    def all(self) -> tuple[TaskState, ...]:
        return self.tasks + ((self.merge,) if self.merge else ())

    @property
    def done(self) -> bool:
        return all(t.terminal for t in self.all)

    @property
    def ok(self) -> bool:
        return all(t.state == "COMPLETED" for t in self.all)

    def line(self) -> str:
        """One progress line: state counts per job, then samples written so far."""
        counts: dict[str, int] = {}
        for task in self.tasks:
            counts[task.state] = counts.get(task.state, 0) + 1
        parts = [", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
        if self.merge:
            why = f" ({self.merge.reason})" if self.merge.reason else ""
            parts.append(f"merge {self.merge.state}{why}")
        parts.append(f"{self.samples_done} samples done")
        return " | ".join(parts)


def _manifest_status(run_dir: Path) -> str | None:
    try:
        manifest = read_manifest(RunDir(run_dir))
    except RunDirError:  # being written, damaged or unreadable: the run dir cannot say
        return None
    return None if manifest is None else manifest.status


def _settle(task: TaskState, run_dir: Path) -> TaskState:
    """A task gone from SLURM without accounting: judge it by the run directory it wrote."""
    if task.state != UNKNOWN:
        return task
    status = _manifest_status(run_dir)
    state = "COMPLETED" if status == "complete" else UNKNOWN
    return TaskState(
        job_id=task.job_id, state=state, reason=f"run dir says {status}", source="run dir"
    )


def _samples_done(run_dir: Path) -> int:
    """Whole sample records written so far (a damaged or cut-short line is no sample)."""
    files = RunDir(run_dir)
    # A merged run holds the shards' samples again: count the merged file alone once it exists.
    parts = [files] if files.samples.is_file() else files.shard_dirs()
    total = 0
    for part in parts:
        try:
            total += len(read_samples(part.samples).records)
        except RunDirError:  # unreadable for now (NFS, permissions): counted on the next poll
            continue
    return total


@dataclass(kw_only=True)
class Job:
    """A submitted run: its ids, its run directory, and how to follow it."""

    run_dir: Path
    job_id: str
    merge_job_id: str | None = None
    shards: int = 1
    slurm: SlurmClient = field(default_factory=Slurm, repr=False)

    def state(self) -> JobStatus:
        tasks = self.slurm.states(self.job_id)
        if len(tasks) == 1 and tasks[0].state == UNKNOWN:
            tasks = self._judged_by_run_dir(tasks[0])
        merge = None
        if self.merge_job_id:
            merge = _settle(self.slurm.states(self.merge_job_id)[0], self.run_dir)
        return JobStatus(tasks=tuple(tasks), merge=merge, samples_done=_samples_done(self.run_dir))

    def _judged_by_run_dir(self, gone: TaskState) -> list[TaskState]:
        if self.shards == 1:
            return [_settle(gone, self.run_dir)]
        return [
            _settle(
                TaskState(job_id=f"{self.job_id}_{i}", state=UNKNOWN, reason=gone.reason),
                RunDir(self.run_dir).shard(i).path,
            )
            for i in range(self.shards)
        ]

    def wait(
        self,
        *,
        poll_s: float = 5.0,
        timeout_s: float | None = None,
        on_progress: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Block until the job (and its merge job) ended; returns the final status."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = self.state()
            if on_progress:
                on_progress(status)
            if status.done:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise SlurmError(
                    f"Job {self.job_id} has not ended after {timeout_s:g} s ({status.line()}). "
                    f"It keeps running; follow it with `evalpipe status {self.run_dir}`."
                )
            time.sleep(poll_s)

    def log_paths(self) -> list[Path]:
        return sorted(RunDir(self.run_dir).logs.glob("*.out"))

    @classmethod
    def load(cls, run_dir: Path, slurm: SlurmClient | None = None) -> Job:
        """The job recorded in RUN_DIR/submission.json."""
        record = read_submission(RunDir(run_dir))
        return cls(
            run_dir=run_dir,
            job_id=record.job_id,
            merge_job_id=record.merge_job_id,
            shards=record.shards,
            slurm=slurm or Slurm(),
        )


def check(prepared: Prepared) -> preflight.Report:
    """The login-node preflight for a prepared job; PreflightError lists what would fail."""
    spec = prepared.spec
    report = preflight.check(
        spec.preset,
        spec.cluster,
        categories=spec.options.run.selection.categories,
        tasks=spec.options.run.selection.tasks,
        backend=spec.options.run.engine.backend,
    )
    report.raise_for_errors()
    return report


def _preflight_record(prepared: Prepared, run_checks: bool) -> dict[str, object]:
    if not run_checks:
        return {"checked": False, "skipped": "--no-check"}
    report = check(prepared)
    return {"checked": True, "warnings": [f.message for f in report.warnings]}


def _record(prepared: Prepared, *, scripts: bool) -> None:
    run_dir = prepared.run_dir
    # SLURM does not create the directory of --output: without it the logs are lost silently.
    RunDir(run_dir).logs.mkdir(parents=True, exist_ok=True)
    if scripts:
        (RunDir(run_dir).job_script).write_text(prepared.script, encoding="utf-8")
    if scripts and prepared.merge_script is not None:
        (RunDir(run_dir).merge_script).write_text(prepared.merge_script, encoding="utf-8")
    write_plan(RunDir(run_dir), prepared.spec.plan)


def submit_prepared(
    prepared: Prepared,
    *,
    slurm: SlurmClient | None = None,
    executor: str = "sbatch",
    run_checks: bool = True,
) -> Job:
    """Preflight, write the scripts and plan, validate with --test-only, submit, record
    submission.json. `run_checks=False` skips the preflight and records that it did."""
    checked = _preflight_record(prepared, run_checks)
    return _submit(prepared, checked, slurm=slurm, executor=executor)


def _submit(
    prepared: Prepared, checked: dict[str, object], *, slurm: SlurmClient | None, executor: str
) -> Job:
    spec = prepared.spec
    submit = EXECUTORS.get(executor)
    if submit is None:
        raise ConfigError(
            f"Unknown executor {executor!r}. Valid executors: {', '.join(EXECUTORS)}."
        )
    client = slurm or Slurm()
    _record(prepared, scripts=executor == "sbatch")
    run_dir = prepared.run_dir
    job_id, argvs, merge_id = submit(prepared, client)
    write_submission(
        RunDir(run_dir),
        Submission(
            executor=executor,
            argv=argvs,
            job_id=job_id,
            merge_job_id=merge_id,
            shards=spec.options.shards,
            preset=spec.preset.name,
            cluster=spec.cluster.name,
            preflight=checked,
            submitted_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            estimate=None if prepared.estimate is None else prepared.estimate.to_dict(),
            choice=None if prepared.choice is None else prepared.choice.to_dict(),
            no_estimate=prepared.no_estimate,
        ),
    )
    return Job(
        run_dir=run_dir,
        job_id=job_id,
        merge_job_id=merge_id,
        shards=spec.options.shards,
        slurm=client,
    )


def default_out(presets: Sequence[str], results: Path = Path("results")) -> Path:
    """A fresh run directory for one preset, or a fresh sweep directory for several."""
    return new_run_dir(results, Path(presets[0]).stem if len(presets) == 1 else "sweep")


def prepare_all(
    presets: Sequence[str],
    cluster: str,
    options: JobOptions,
    out: Path,
    *,
    results: Sequence[Path] | None = None,
) -> list[Prepared]:
    """One preset: `out` is its run directory. Several (a sweep): each gets OUT/<preset>/.

    Every preset is planned and rendered before anything is submitted, so one that does not
    fit stops the whole sweep.
    """
    if len(presets) == 1:
        return [prepare(presets[0], cluster, options, out, results=results)]
    stems = [Path(p).stem for p in presets]
    if len(set(stems)) != len(stems):
        raise ConfigError(f"A sweep names a preset twice: {', '.join(presets)}.")
    return [
        prepare(p, cluster, options, out / stem, results=results)
        for p, stem in zip(presets, stems, strict=True)
    ]


def submit_all(
    prepared: Sequence[Prepared],
    *,
    sweep_dir: Path | None = None,
    slurm: SlurmClient | None = None,
    executor: str = "sbatch",
    run_checks: bool = True,
) -> list[Job]:
    """Submit each prepared job; a sweep also gets SWEEP_DIR/sweep.json (preset → run, job).

    Every job's preflight runs before the first is submitted, so one missing model stops all."""
    if run_checks:
        for p in prepared:
            check(p)
    client = slurm or Slurm()
    jobs = [
        submit_prepared(p, slurm=client, executor=executor, run_checks=run_checks) for p in prepared
    ]
    if sweep_dir is not None:
        write_sweep(
            sweep_dir,
            SweepManifest(
                runs=[
                    SweepRun(preset=p.spec.preset.name, run_dir=j.run_dir.name, job_id=j.job_id)
                    for p, j in zip(prepared, jobs, strict=True)
                ]
            ),
        )
    return jobs


def submit(
    preset: str,
    cluster: str,
    *,
    options: JobOptions | None = None,
    out: Path | None = None,
    slurm: SlurmClient | None = None,
    executor: str = "sbatch",
    run_checks: bool = True,
) -> Job:
    """Plan, render, preflight, validate and submit one preset; returns the job handle."""
    run_dir = out or default_out([preset])
    prepared = prepare(preset, cluster, options or JobOptions(), run_dir)
    return submit_prepared(prepared, slurm=slurm, executor=executor, run_checks=run_checks)


def submit_sweep(
    presets: Sequence[str],
    cluster: str,
    *,
    options: JobOptions | None = None,
    out: Path | None = None,
    slurm: SlurmClient | None = None,
    executor: str = "sbatch",
    run_checks: bool = True,
) -> list[Job]:
    """One job per preset, each sized by the planner, under one sweep directory."""
    if len(presets) < 2:
        raise ConfigError("A sweep needs two or more presets; use submit() for one.")
    sweep_dir = out or default_out(presets)
    prepared = prepare_all(presets, cluster, options or JobOptions(), sweep_dir)
    return submit_all(
        prepared, sweep_dir=sweep_dir, slurm=slurm, executor=executor, run_checks=run_checks
    )
