"""Plan → render → validate → submit → record: the Python API behind `evalpipe submit`.

    from evalpipe.jobs.sbatchsubmit import submit
    options = JobOptions(run=RunnerOptions(selection=Selection(limit=5)))
    job = submit("tiny_random", "local", options=options)
    status = job.wait()          # or job.state()
    print(job.job_id, job.run_dir, status.ok)

Only the SlurmClient touches the scheduler; pass FakeSlurm to see what would be run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from evalpipe.catalog.clusters import load_cluster
from evalpipe.catalog.configpath import is_path
from evalpipe.catalog.gpus import Gpu, get_gpu
from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.slurmtime import slurm_minutes
from evalpipe.core.errors import ConfigError, EvalpipeError
from evalpipe.jobs import preflight, sbatchrender
from evalpipe.jobs.executors import EXECUTORS
from evalpipe.jobs.jobspec import JobOptions, JobSpec, make_jobspec
from evalpipe.jobs.jobstatus import Job
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import new_run_dir
from evalpipe.rundir.submission import Submission, write_plan, write_submission
from evalpipe.rundir.sweep import SweepManifest, SweepRun, run_name, write_sweep
from evalpipe.slurm.client import Slurm, SlurmClient, sbatch_argv

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
    loaded = load_preset(preset)
    site = load_cluster(cluster)
    gpu = get_gpu(site.gpu)
    # A preset given as a file must be found from the job's working directory too.
    ref = str(Path(preset).expanduser().resolve()) if is_path(preset) else preset

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
    merge = sbatchrender.render_merge(spec) if spec.options.shards > 1 else None
    return dataclasses.replace(
        cost, spec=spec, script=sbatchrender.render_job(spec), merge_script=merge
    )


def _cost(spec: JobSpec, gpu: Gpu, options: JobOptions, results: Sequence[Path] | None) -> Prepared:
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
    return new_run_dir(results, run_name(presets[0]) if len(presets) == 1 else "sweep")


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
    # The names sweep.json records (rundir.sweep.run_name), so its runs are where it says.
    names = [run_name(p) for p in presets]
    if len(set(names)) != len(names):
        raise ConfigError(f"A sweep names a preset twice: {', '.join(presets)}.")
    return [
        prepare(p, cluster, options, out / name, results=results)
        for p, name in zip(presets, names, strict=True)
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
