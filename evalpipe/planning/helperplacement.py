"""A helper model beside the evaluated one (pure): the judge of judged tasks, the user simulator
of agent episodes. What both placements share: the helper's own layout on one node, whether
both layouts fit on one node at once, and what the job asks for when they run side by side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import DoesNotFitError
from evalpipe.planning import planner
from evalpipe.planning.planner import Plan

# after: once the model's engine has closed (the judge); side-by-side: on GPUs of its own (a
# judge's also behind a server, with none); same-engine: the model's own engine serves it, and
# server: behind a server (the user simulator's).
PlacementKind = Literal["after", "side-by-side", "same-engine", "server"]


@dataclass(frozen=True, kw_only=True)
class Helper:
    """Who the helper is, as messages name it, and the flag that puts it behind a server."""

    name: str  # "judge", "user simulator"
    server_flag: str  # e.g. --judge-base-url


JUDGE = Helper(name="judge", server_flag="--judge-base-url")
USER_SIM = Helper(name="user simulator", server_flag="--user-sim-base-url")


@dataclass(frozen=True, kw_only=True)
class Placement:
    """The chosen placement, why, and what the job asks for on each node."""

    kind: PlacementKind
    reason: str
    nodes: int
    gpus_per_node: int  # the job's request: the larger phase's, or both side by side
    model_replicas: int  # the model's replicas in this placement (side by side may leave fewer)
    model_gpus: int  # per node, every replica's
    helper_gpus: int  # per node; 0 for a helper behind a server or in the model's engine

    def describe(self) -> str:
        return f"{self.kind}: {self.reason}"


def per_replica(plan: Plan) -> int:
    return plan.tensor_parallel_size * plan.pipeline_parallel_size


def plan_helper(
    helper: Helper,
    preset: Preset,
    gpu: Gpu,
    *,
    gpus_per_node: int,
    overhead_correction_gib: float = 0.0,
) -> Plan:
    """The helper preset's smallest layout on one node of `gpu`: a helper runs on one node, the
    job's first (DoesNotFitError, saying so, when it needs more)."""
    where = (
        f"The {helper.name} {preset.name} on one node of {gpus_per_node} × {gpu.name} (a job's "
        f"{helper.name} runs on one node: put it behind a server instead, {helper.server_flag})"
    )
    try:
        plan = planner.plan(
            preset,
            gpu,
            gpus_per_node=gpus_per_node,
            max_nodes=1,
            overhead_correction_gib=overhead_correction_gib,
        )
    except DoesNotFitError as exc:
        raise DoesNotFitError(f"{where}: {exc}") from None
    if not plan.fits:
        raise DoesNotFitError(f"{where}: " + "; ".join(plan.notes))
    return plan


def side_by_side_refusal(
    model: Plan, helper_plan: Plan | None, gpus_per_node: int, helper: Helper = JUDGE
) -> str | None:
    """Why both layouts cannot run at once on one node, or None when they can."""
    if model.nodes > 1:
        return f"the model's layout spans {model.nodes} nodes; side by side needs one node"
    if helper_plan is None:
        return None
    if helper_plan.nodes > 1:
        return (
            f"the {helper.name}'s layout spans {helper_plan.nodes} nodes; side by side needs one "
            "node"
        )
    need = per_replica(model) + per_replica(helper_plan)
    if need > gpus_per_node:
        return (
            f"the model's TP={model.tensor_parallel_size} × PP={model.pipeline_parallel_size} "
            f"and the {helper.name}'s TP={helper_plan.tensor_parallel_size} × PP="
            f"{helper_plan.pipeline_parallel_size} need {need} GPUs at once; a node has "
            f"{gpus_per_node}"
        )
    return None


def side_by_side(model: Plan, helper_plan: Plan | None, gpus_per_node: int) -> Placement:
    """Both on one node at once (the caller checked `side_by_side_refusal`): the helper's GPUs
    (none behind a server), and as many of the model's replicas as the rest holds. Its reason is
    left to the caller."""
    helper_gpus = 0 if helper_plan is None else per_replica(helper_plan)
    one = per_replica(model)
    beside = min(model.replicas, (gpus_per_node - helper_gpus) // one)
    return Placement(
        kind="side-by-side",
        reason="",
        nodes=1,
        gpus_per_node=beside * one + helper_gpus,
        model_replicas=beside,
        model_gpus=beside * one,
        helper_gpus=helper_gpus,
    )
