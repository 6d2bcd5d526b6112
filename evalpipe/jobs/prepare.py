"""Load, plan and render one job: the Prepared job that `evalpipe render` prints and `evalpipe
submit` submits, with its cost estimate where one is asked for. Nothing is written.

    from evalpipe.jobs.prepare import prepare
    prepared = prepare("tiny_random", "local", JobOptions(), Path("results/tiny"))
    print(prepared.script)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evalpipe.catalog.clusters import load_cluster
from evalpipe.catalog.configpath import is_path
from evalpipe.catalog.gpus import Gpu, get_gpu
from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.slurmtime import slurm_minutes
from evalpipe.core.errors import EvalpipeError
from evalpipe.jobs import sbatchrender
from evalpipe.jobs.jobspec import JobOptions, JobSpec, make_jobspec
from evalpipe.rundir.layout import RunDir
from evalpipe.slurm.argv import sbatch_argv

if TYPE_CHECKING:  # the estimate's modules load tasks: only when an estimate is made
    from evalpipe.estimate.autosize import Choice
    from evalpipe.estimate.cost import Estimate
    from evalpipe.estimate.predict import Prediction


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
    pilot: Path | None = None,
) -> Prepared:
    """Load, plan and render one job. `preset`/`cluster` are registry names or YAML paths.

    The cost is estimated when `results` (the folders to calibrate on) is given, a --budget is,
    or the options leave shards, replicas or the time limit to the estimate; then those are
    chosen first. `pilot`: the run directory of a finished pilot whose lengths and rates the
    estimate takes, and whose samples the job resumes (estimate/pilot.py)."""
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
    cost = _cost(spec, gpu, options, results, pilot)
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


def _cost(
    spec: JobSpec,
    gpu: Gpu,
    options: JobOptions,
    results: Sequence[Path] | None,
    pilot: Path | None,
) -> Prepared:
    """The estimate (and choice) for a first spec; a Prepared whose scripts are filled later."""
    blank = Prepared(spec=spec, script="", merge_script=None)
    if results is None and not options.auto_chosen and options.budget is None and pilot is None:
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
            results=[*(results or [DEFAULT_RESULTS]), *([pilot] if pilot else [])],
            calibration_dirs=[Path(site.cache_dir)] if site.cache_dir else [],
        )
        if pilot is not None:
            from evalpipe.estimate.pilot import after_pilot

            prediction = after_pilot(prediction, pilot)
    except EvalpipeError as exc:
        if options.auto_chosen or options.budget is not None or pilot is not None:
            raise
        return dataclasses.replace(blank, no_estimate=str(exc))
    if not options.auto_chosen:
        est = prediction.estimate(shards=spec.options.shards, replicas=spec.plan.replicas)
        _check_budget(options, prediction, est)
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
        # A pilot is one job (--shards auto then sizes its time limit alone).
        shards=1
        if options.run.selection.pilot is not None
        else None
        if options.auto_shards
        else options.shards,
        limit=limit,
        auto_time=options.auto_time,
        margin=options.margin,
        max_minutes=max_minutes,
        target_wall_s=target,
    )
    _check_budget(options, prediction, choice.estimate)
    return dataclasses.replace(blank, estimate=choice.estimate, choice=choice)


def _check_budget(options: JobOptions, prediction: Prediction, chosen: Estimate) -> None:
    """--budget against the estimate of the layout and shards chosen."""
    if options.budget is None:
        return
    from evalpipe.estimate.budget import check_budget

    check_budget(
        options.budget,
        prediction.work,
        lambda work: dataclasses.replace(prediction, work=tuple(work)).estimate(
            shards=chosen.shards, replicas=chosen.replicas
        ),
        pilot=options.run.selection.pilot is not None,
    )
