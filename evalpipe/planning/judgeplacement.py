"""Where a judged run's judge runs (pure): after generation on the same GPUs, or side by side on
a split of the node's GPUs, chosen from the two plans and, when known, the predicted walls.

After generation, the model's engine is closed (its process ends, so its memory is really back)
before the judge loads: the job needs the larger phase's GPUs. Side by side, the judge starts
with generation on GPUs of its own and judges answers as they are written: the job needs both
layouts at once, on one node (the judge follows the run directory, which its node reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal, get_args

from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError, DoesNotFitError
from evalpipe.planning.helperplacement import (
    JUDGE,
    Placement,
    per_replica,
    plan_helper,
    side_by_side,
    side_by_side_refusal,
)
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


def plan_judge(
    judge: Preset, gpu: Gpu, *, gpus_per_node: int, overhead_correction_gib: float = 0.0
) -> Plan:
    """The judge preset's smallest layout on one node of `gpu` (helperplacement.plan_helper)."""
    return plan_helper(
        JUDGE, judge, gpu, gpus_per_node=gpus_per_node,
        overhead_correction_gib=overhead_correction_gib,
    )  # fmt: skip


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
    judge_gpus = 0 if judge is None else per_replica(judge)
    after = Placement(
        kind=AFTER,
        reason="",
        nodes=max(model.nodes, 1 if judge is None else judge.nodes),
        gpus_per_node=max(model.gpus_per_node, 0 if judge is None else judge.gpus_per_node),
        model_replicas=model.replicas,
        model_gpus=model.gpus_per_node,
        helper_gpus=judge_gpus,
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
    if refusal is not None:
        return _with(after, f"side by side does not fit ({refusal}); {after_why}")
    side = side_by_side(model, judge, gpus_per_node)
    if wanted == SIDE_BY_SIDE:
        return _with(side, f"asked for; {_side_why(side)}")
    if walls_s is not None:
        a, s = walls_s[AFTER], walls_s[SIDE_BY_SIDE]
        if s < a:
            why = f"predicted wall {s:.0f} s against {a:.0f} s after; {_side_why(side)}"
            return _with(side, why)
        return _with(after, f"predicted wall {a:.0f} s against {s:.0f} s side by side; {after_why}")
    if side.model_replicas < model.replicas:
        return _with(
            after,
            f"side by side the judge's {judge_gpus} GPU(s) would leave the model "
            f"{side.model_replicas} of its "
            f"{model.replicas} replicas (plan --estimate compares the walls); {after_why}",
        )
    return _with(side, _side_why(side))


def _side_why(side: Placement) -> str:
    judge = (
        "a judge behind a server uses none of the job's GPUs"
        if side.helper_gpus == 0
        else f"both fit on one node at once ({side.model_gpus} GPU(s) for the model, "
        f"{side.helper_gpus} for the judge)"
    )
    return (
        f"{judge}; the judge judges answers as they are written, so its load and all but the "
        f"last answers' judging overlap generation; the job asks for {side.gpus_per_node} GPU(s)"
    )


def _with(placement: Placement, reason: str) -> Placement:
    return replace(placement, reason=reason)
