"""Gather what an estimate needs on this machine — the tasks' work (tokenizer, task files), past
jobs in the results folders, smoke calibration records — and estimate a plan, or choose a
submission's shards and time limit from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from evalpipe.catalog.gpus import Gpu, load_gpus
from evalpipe.catalog.pilot import PilotSize
from evalpipe.catalog.preset import Preset
from evalpipe.catalog.selection import Selection
from evalpipe.estimate.autosize import Choice, Limit, choose
from evalpipe.estimate.calibration import SHARED_FOLDER, SUFFIX, Calibration, load_calibrations
from evalpipe.estimate.cost import Basis, Estimate, basis, estimate
from evalpipe.estimate.history import load_history
from evalpipe.estimate.judgework import (
    PhasesEstimate,
    judge_work,
    last_answer_s,
    placement_walls,
    turns_work,
)
from evalpipe.estimate.usersimwork import SimulatesUser, UserSimEstimate, user_sim_work
from evalpipe.estimate.workmodel import TaskWork, task_work, token_counter
from evalpipe.planning.helperplacement import Placement, side_by_side_refusal
from evalpipe.planning.judgeplacement import choose_placement
from evalpipe.planning.planner import Plan
from evalpipe.tasks.base import Task
from evalpipe.tasks.gradings import Grading

DEFAULT_RESULTS = Path("results")


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """An estimator bound to one preset and plan: its work and basis, re-estimable per layout."""

    preset: Preset
    plan: Plan
    work: tuple[TaskWork, ...]
    basis: Basis
    judged: tuple[tuple[Task, Grading], ...] = ()  # the judged tasks among the work's
    # Agent tasks among the work's whose episodes have a simulated user (its requests planned)
    agents: tuple[SimulatesUser, ...] = ()

    def estimate(self, shards: int = 1, replicas: int | None = None) -> Estimate:
        return estimate(self.preset, self.plan, self.work, self.basis, shards=shards,
                        replicas=replicas)  # fmt: skip

    def choose(
        self,
        *,
        shards: int | None,
        limit: Limit,
        auto_time: bool,
        margin: float,
        max_minutes: int | None,
        target_wall_s: float | None,
    ) -> Choice:
        return choose(
            self.estimate,
            shards=shards,
            replicas=self.plan.replicas,
            limit=limit,
            auto_time=auto_time,
            margin=margin,
            max_minutes=max_minutes,
            target_wall_s=target_wall_s,
        )


def _calibration_files(folders: Sequence[Path]) -> list[Path]:
    """Smoke records in each folder, its calibrations/ and its run directories (two levels)."""
    found: list[Path] = []
    for folder in folders:
        for pattern in (f"*{SUFFIX}", f"*/*{SUFFIX}", f"{SHARED_FOLDER}/*{SUFFIX}"):
            found += sorted(folder.glob(pattern))
    return list(dict.fromkeys(found))


def calibrations(folders: Sequence[Path]) -> list[Calibration]:
    return load_calibrations(_calibration_files(folders))


def predictor(
    preset: Preset,
    gpu: Gpu,
    plan: Plan,
    selection: Selection,
    *,
    judge_data: str | None = None,
    results: Sequence[Path] = (DEFAULT_RESULTS,),
    calibration_dirs: Sequence[Path] = (),
    calibrate_on_runs: bool = True,
    user_sim: bool = False,
) -> Prediction:
    """Load the tasks (their data only where it is local) and what `results` and
    `calibration_dirs` hold about this preset; EstimateError if nothing makes rates possible.
    `user_sim`: a user simulator is named, so the agent tasks among them are found."""
    from evalpipe.tasks.kindbase import LoadOptions
    from evalpipe.tasks.kinds import load_selection

    # The same selection as `evalpipe run`: named tasks alone, else the preset's categories,
    # with the budgets the run will generate with in the plan's context.
    chosen = load_selection(
        selection.tasks,
        LoadOptions.selected(
            selection, preset, judge_data=Path(judge_data) if judge_data else None
        ),
        max_tokens=selection.max_tokens,
        max_model_len=plan.max_model_len,
    )
    tasks = chosen.tasks
    jobs = load_history([p for p in results if p.is_dir()], load_gpus())
    counter = token_counter(preset)
    work = tuple(
        task_work(
            t,
            preset,
            limit=selection.limit,
            history=jobs,
            counter=counter,
            context=plan.max_model_len,
        )
        for t in tasks
    )
    how = basis(
        preset,
        gpu,
        plan,
        calibrations=calibrations([*results, *calibration_dirs]),
        jobs=jobs if calibrate_on_runs else (),
    )
    if selection.pilot is not None:  # a pilot's job: the samples it draws of each task
        size = PilotSize.parse(selection.pilot)
        work = tuple(replace(w, samples=size.samples(w.task, w.samples)) for w in work)
    # A judged task's turns are requests of their own (the task files' tasks have one turn).
    work = tuple(
        turns_work(t, w, selection.limit) if t.name in chosen.gradings else w
        for t, w in zip(tasks, work, strict=True)
    )
    pairs = tuple((t, chosen.gradings[t.name]) for t in tasks if t.name in chosen.gradings)
    agents: tuple[SimulatesUser, ...] = ()
    if user_sim:  # found only where a user simulator's share is wanted
        agents = tuple(t for t in tasks if chosen.ask(t).simulated_user
                       and isinstance(t, SimulatesUser))  # fmt: skip
    return Prediction(preset=preset, plan=plan, work=work, basis=how, judged=pairs, agents=agents)


def judge_predictor(
    model: Prediction,
    judge: Preset,
    gpu: Gpu,
    plan: Plan,
    *,
    limit: int | None,
    max_tokens: int | None,
    default_max_tokens: int,
    results: Sequence[Path] = (DEFAULT_RESULTS,),
    calibration_dirs: Sequence[Path] = (),
) -> Prediction:
    """The judging phase's estimator: the judge's work on the answers `model` predicts for its
    judged tasks, at the judge's rates on `plan` (its smoke calibration or the roofline). A
    judgment's budget: `max_tokens` (--judge-max-tokens), else the benchmark's own judge
    sampling (Arena-Hard's), else `default_max_tokens`, as the judging phase chooses."""
    answers = {w.task: w for w in model.work}
    counter = token_counter(judge)
    work = tuple(
        judge_work(
            task,
            grading,
            answers[task.name],
            judge,
            limit=limit,
            max_tokens=_judgment_tokens(grading, max_tokens, default_max_tokens),
            counter=counter,
        )
        for task, grading in model.judged
    )
    how = basis(
        judge,
        gpu,
        plan,
        calibrations=calibrations([*results, *calibration_dirs]),
        jobs=load_history([p for p in results if p.is_dir()], load_gpus()),
    )
    return Prediction(preset=judge, plan=plan, work=work, basis=how)


def user_sim_predictor(
    model: Prediction,
    user_sim: Preset | None,
    gpu: Gpu,
    plan: Plan | None,
    *,
    limit: int | None,
    results: Sequence[Path] = (DEFAULT_RESULTS,),
    calibration_dirs: Sequence[Path] = (),
) -> Prediction:
    """The user simulator's requests for the agent tasks `model` predicts (the first `limit`
    of each); at the model's rates in its engine (`user_sim` None), else at the user
    simulator's on its own `plan`."""
    answering = model.preset if user_sim is None else user_sim
    counter = token_counter(answering)
    agents = {t.name: t for t in model.agents}
    work = tuple(
        user_sim_work(agents[w.task], w, answering, limit=limit, counter=counter)
        for w in model.work
        if w.task in agents
    )
    if user_sim is None or plan is None:
        return Prediction(preset=model.preset, plan=model.plan, work=work, basis=model.basis)
    how = basis(
        user_sim,
        gpu,
        plan,
        calibrations=calibrations([*results, *calibration_dirs]),
        jobs=load_history([p for p in results if p.is_dir()], load_gpus()),
    )
    return Prediction(preset=user_sim, plan=plan, work=work, basis=how)


def estimate_user_sim(
    model: Prediction, user_sim: Prediction | None, placement: Placement, *, shards: int = 1
) -> tuple[Estimate, UserSimEstimate]:
    """The agent run's wall with its user simulator where `placement` puts it (`user_sim`
    None: behind a server, not estimated): (the generation as placed, the user simulator's
    share)."""
    generation = model.estimate(shards=shards, replicas=placement.model_replicas)
    share = None if user_sim is None else user_sim.estimate(shards=shards)
    wall = generation.wall_s
    if share is not None and placement.kind == "same-engine":  # one engine does both works
        both = estimate(model.preset, model.plan, (*model.work, *user_sim.work), model.basis,
                        shards=shards)  # fmt: skip
        wall = both.wall_s
    elif share is not None:  # turns interleave on two engines: the longer of the two
        wall = generation.wall_s.combine(share.wall_s, max)
    return generation, UserSimEstimate(
        placement=placement.kind, generation=generation, share=share, wall_s=wall
    )


def _judgment_tokens(grading: Grading, given: int | None, default: int) -> int:
    if given is not None:
        return given
    return default if grading.sampling is None else grading.sampling.max_tokens


# An agent run's user simulator: its requests' estimator (None: behind a server) and placement.
UserSim = tuple[Prediction | None, Placement]


def _generation_phase(
    model: Prediction, user_sim: UserSim | None, *, shards: int, replicas: int | None
) -> tuple[Estimate, Estimate]:
    """(the model's work on `replicas` engines, default the plan's; the generation phase: the
    same, its wall with an agent run's user simulator's turns where it runs). A user
    simulator beside the model may leave it fewer replicas than `replicas`."""
    if user_sim is None:
        alone = model.estimate(shards=shards, replicas=replicas)
        return alone, alone
    simulator, placement = user_sim
    fewest = min(replicas or placement.model_replicas, placement.model_replicas)
    placed = replace(placement, model_replicas=fewest)
    alone, share = estimate_user_sim(model, simulator, placed, shards=shards)
    return alone, replace(alone, wall_s=share.wall_s)


def estimate_phases(
    model: Prediction,
    judge: Prediction,
    *,
    gpus_per_node: int,
    wanted: str = "auto",
    shards: int = 1,
    user_sim: UserSim | None = None,
) -> tuple[Estimate, PhasesEstimate]:
    """Both phases of a judged run, each placement's wall, and the placement the planner
    chooses from them (planning/judgeplacement.py): (the generation as placed, the phases).
    With `user_sim` (an agent run's), the generation phase holds the user simulator's turns."""
    refusal = side_by_side_refusal(model.plan, judge.plan, gpus_per_node)
    judging = judge.estimate()
    own, generation = _generation_phase(model, user_sim, shards=shards, replicas=None)
    own_beside = beside = None
    if refusal is None:
        side = choose_placement(model.plan, judge.plan, gpus_per_node=gpus_per_node,
                                wanted="side-by-side")  # fmt: skip
        own_beside, beside = _generation_phase(model, user_sim, shards=shards,
                                               replicas=side.model_replicas)  # fmt: skip
    last = last_answer_s(judge.basis.rates, judging.tasks, judge.basis.rate_factor)
    after_s, side_s = placement_walls(generation, beside, judging, last)
    walls = {"after": after_s.mid} | ({} if side_s is None else {"side-by-side": side_s.mid})
    placed = choose_placement(
        model.plan, judge.plan, gpus_per_node=gpus_per_node, wanted=wanted,
        walls_s=walls if side_s is not None else None,
    )  # fmt: skip
    phases = PhasesEstimate(
        generation=generation,
        judging=judging,
        after_s=after_s,
        side_by_side_s=side_s,
        placement=placed.kind,
        reason=placed.reason,
    )
    return (own_beside if placed.kind == "side-by-side" and own_beside else own), phases
