"""Preflight → validate → submit → record jobs prepared by evalpipe/jobs/prepare.py: the Python
API behind `evalpipe submit`.

    from evalpipe.jobs.sbatchsubmit import submit
    options = JobOptions(run=RunnerOptions(selection=Selection(limit=5)))
    job = submit("tiny_random", "local", options=options)
    status = job.wait()          # or job.state()
    print(job.job_id, job.run_dir, status.ok)

Only the SlurmClient touches the scheduler; pass FakeSlurm to see what would be run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from evalpipe.core.errors import ConfigError
from evalpipe.jobs import preflight
from evalpipe.jobs.executors import EXECUTORS
from evalpipe.jobs.jobspec import JobOptions
from evalpipe.jobs.jobstatus import Job
from evalpipe.jobs.prepare import Prepared, prepare
from evalpipe.rundir.layout import RunDir, new_run_dir
from evalpipe.rundir.submission import Submission, write_plan, write_submission
from evalpipe.rundir.sweep import SweepManifest, SweepRun, run_name, write_sweep
from evalpipe.slurm.client import Slurm, SlurmClient


def check(prepared: Prepared) -> preflight.Report:
    """The login-node preflight for a prepared job; PreflightError lists what would fail."""
    spec = prepared.spec
    report = preflight.check(
        spec.preset,
        spec.cluster,
        categories=spec.options.run.selection.categories,
        tasks=spec.options.run.selection.tasks,
        backend=spec.options.run.engine.backend,
        allow_unsafe_code=spec.options.run.selection.allow_unsafe_code,
        strict_versions=spec.options.run.runtime.strict_versions,
        max_model_len=spec.plan.max_model_len,
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
    pilot: Path | None = None,
) -> list[Prepared]:
    """One preset: `out` is its run directory. Several (a sweep): each gets OUT/<preset>/.

    Every preset is planned and rendered before anything is submitted, so one that does not
    fit stops the whole sweep. `pilot`: one preset's finished pilot (`out`), whose figures
    size the job.
    """
    if len(presets) == 1:
        return [prepare(presets[0], cluster, options, out, results=results, pilot=pilot)]
    if pilot is not None:
        raise ConfigError(
            f"--after-pilot continues one preset's pilot, not a sweep of {len(presets)}: "
            "submit each preset with the run directory of its own pilot."
        )
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
