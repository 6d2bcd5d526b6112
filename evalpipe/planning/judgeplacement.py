"""Where a judged run's judge runs (pure): after generation on the same GPUs, or side by side on
a split of the node's GPUs, chosen from the two plans and, when known, the predicted walls.

After generation, the model's engine is closed (its process ends, so its memory is really back)
before the judge loads: the job needs the larger phase's GPUs. Side by side, the judge starts
with generation on GPUs of its own and judges answers as they are written: the job needs both
layouts at once, on one node (the judge follows the run directory, which its node reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal, get_args

from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError, DoesNotFitError
from evalpipe.planning import planner
from evalpipe.planning.planner import Plan

JudgePlacement = Literal["auto", "after", "side-by-side"]
PLACEMENTS: tuple[str, ...] = get_args(JudgePlacement)
AFTER: Literal["after"] = "after"
SIDE_BY_SIDE: Literal["side-by-side"] = "side-by-side"


def check_placement(value: str) -> None:
    if value not in PLACEMENTS:
        raise ConfigError(
            f"Judge placement {value!r} is not one of {', '.join(PLACEMENTS)}: auto lets the "
            "planner choose, after judges once generation has ended, side-by-side judges on "
            "GPUs of its own while the model generates."
        )


@dataclass(frozen=True, kw_only=True)
class Placement:
    """The chosen placement, why, and what the job asks for on each node."""

    kind: Literal["after", "side-by-side"]
    reason: str
    nodes: int
    gpus_per_node: int  # the job's request: the larger phase's, or both side by side
    model_replicas: int  # the model's replicas in this placement (side by side may leave fewer)
    model_gpus: int  # per node, every replica's
    judge_gpus: int  # per node; 0 for a judge behind a server

    def describe(self) -> str:
        return f"{self.kind}: {self.reason}"


def _per_replica(plan: Plan) -> int:
    return plan.tensor_parallel_size * plan.pipeline_parallel_size


def plan_judge(
    judge: Preset, gpu: Gpu, *, gpus_per_node: int, overhead_correction_gib: float = 0.0
) -> Plan:
    """The judge preset's smallest layout on one node of `gpu`: a judge runs on one node, the
    job's first (DoesNotFitError, saying so, when it needs more)."""
    where = (
        f"The judge {judge.name} on one node of {gpus_per_node} × {gpu.name} (a job's judge "
        "runs on one node: judge with a server instead, --judge-base-url)"
    )
    try:
        plan = planner.plan(
            judge,
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


def side_by_side_refusal(model: Plan, judge: Plan | None, gpus_per_node: int) -> str | None:
    """Why both layouts cannot run at once on one node, or None when they can."""
    if model.nodes > 1:
        return f"the model's layout spans {model.nodes} nodes; side by side needs one node"
    if judge is None:
        return None
    if judge.nodes > 1:
        return f"the judge's layout spans {judge.nodes} nodes; side by side needs one node"
    need = _per_replica(model) + _per_replica(judge)
    if need > gpus_per_node:
        return (
            f"the model's TP={model.tensor_parallel_size} × PP={model.pipeline_parallel_size} "
            f"and the judge's TP={judge.tensor_parallel_size} × PP="
            f"{judge.pipeline_parallel_size} need {need} GPUs at once; a node has {gpus_per_node}"
        )
    return None


def choose_placement(
    model: Plan,
    judge: Plan | None,
    *,
    gpus_per_node: int,
    wanted: str = "auto",
    walls_s: Mapping[str, float] | None = None,
    apart: str | None = None,
) -> Placement:
    """Place the judge (`judge` None: behind a server, using none of the job's GPUs).

    auto: side by side when both layouts fit on one node at once and that shortens the wall —
    by `walls_s` (predicted seconds per placement) when given, else when the model keeps all
    its replicas (judging then overlaps generation and costs it nothing). `apart`: why the job
    cannot hold both phases at once whatever the layouts. A forced side-by-side that does not
    fit is refused, saying why."""
    check_placement(wanted)
    refusal = apart or side_by_side_refusal(model, judge, gpus_per_node)
    if wanted == SIDE_BY_SIDE and refusal is not None:
        raise DoesNotFitError(
            f"--judge-placement side-by-side: {refusal}. Use --judge-placement after (or auto)."
        )
    judge_gpus = 0 if judge is None else _per_replica(judge)
    one = _per_replica(model)
    beside = min(model.replicas, (gpus_per_node - judge_gpus) // one) if refusal is None else 0
    side = Placement(
        kind=SIDE_BY_SIDE,
        reason="",
        nodes=1,
        gpus_per_node=beside * one + judge_gpus,
        model_replicas=beside,
        model_gpus=beside * one,
        judge_gpus=judge_gpus,
    )
    after = Placement(
        kind=AFTER,
        reason="",
        nodes=max(model.nodes, 1 if judge is None else judge.nodes),
        gpus_per_node=max(model.gpus_per_node, 0 if judge is None else judge.gpus_per_node),
        model_replicas=model.replicas,
        model_gpus=model.gpus_per_node,
        judge_gpus=judge_gpus,
    )
    larger = (
        "the judge's"
        if judge is not None and after.gpus_per_node > model.gpus_per_node
        else ("the model's")
    )
    after_why = (
        f"the model's engine closes before the judge loads; the job asks for {larger} "
        f"{after.gpus_per_node} GPU(s) per node"
    )
    if wanted == AFTER:
        return _with(after, f"asked for; {after_why}")
    if wanted == SIDE_BY_SIDE:
        return _with(side, f"asked for; {_side_why(side)}")
    if refusal is not None:
        return _with(after, f"side by side does not fit ({refusal}); {after_why}")
    if walls_s is not None:
        a, s = walls_s[AFTER], walls_s[SIDE_BY_SIDE]
        if s < a:
            why = f"predicted wall {s:.0f} s against {a:.0f} s after; {_side_why(side)}"
            return _with(side, why)
        return _with(after, f"predicted wall {a:.0f} s against {s:.0f} s side by side; {after_why}")
    if beside < model.replicas:
        return _with(
            after,
            f"side by side the judge's {judge_gpus} GPU(s) would leave the model {beside} of its "
            f"{model.replicas} replicas (plan --estimate compares the walls); {after_why}",
        )
    return _with(side, _side_why(side))


def _side_why(side: Placement) -> str:
    judge = (
        "a judge behind a server uses none of the job's GPUs"
        if side.judge_gpus == 0
        else f"both fit on one node at once ({side.model_gpus} GPU(s) for the model, "
        f"{side.judge_gpus} for the judge)"
    )
    return (
        f"{judge}; the judge judges answers as they are written, so its load and all but the "
        f"last answers' judging overlap generation; the job asks for {side.gpus_per_node} GPU(s)"
    )


def _with(placement: Placement, reason: str) -> Placement:
    return replace(placement, reason=reason)
