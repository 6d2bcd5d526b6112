"""Where an agent run's user simulator runs (pure): in the evaluated model's engine when it is
the run's own preset, behind a server when it has a URL, else side by side on a split of the
node's GPUs. Its requests interleave with the agent's in real time (each episode waits on both
models turn by turn), so unlike the judge it cannot run after generation: a user simulator that
fits none of these is refused, saying what does not fit."""

from __future__ import annotations

from dataclasses import replace

from evalpipe.catalog.gpus import Gpu
from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.core.errors import DoesNotFitError
from evalpipe.planning.helperplacement import (
    USER_SIM,
    Placement,
    plan_helper,
    side_by_side,
    side_by_side_refusal,
)
from evalpipe.planning.planner import Plan


def place_user_sim(
    model: Plan,
    user_sim: Plan | None,
    *,
    same_engine: bool,
    gpus_per_node: int,
    apart: str | None = None,
) -> Placement:
    """Place the user simulator: `same_engine` when its preset is the run's; `user_sim` its own
    layout (helperplacement.plan_helper), None behind a server. `apart`: why the job cannot
    hold a second model beside the first whatever the layouts (a server-mode job)."""
    if same_engine or user_sim is None:
        return Placement(
            kind="same-engine" if same_engine else "server",
            reason="the user simulator is the evaluated model's preset: the model's engine "
            "serves both, its requests beside the agent's"
            if same_engine
            else "behind a server (--user-sim-base-url): none of the job's GPUs",
            nodes=model.nodes,
            gpus_per_node=model.gpus_per_node,
            model_replicas=model.replicas,
            model_gpus=model.gpus_per_node,
            helper_gpus=0,
        )
    refusal = apart or side_by_side_refusal(model, user_sim, gpus_per_node, USER_SIM)
    if refusal is not None:
        raise DoesNotFitError(
            f"The user simulator {user_sim.preset} cannot run beside {model.preset}: "
            f"{refusal}. Its turns interleave with the agent's, so it cannot wait for the model "
            "to finish: serve it elsewhere (--user-sim-base-url URL), choose a smaller "
            f"--user-sim preset, or let the model play the user (--user-sim {model.preset})."
        )
    side = side_by_side(model, user_sim, gpus_per_node)
    kept = (
        ""
        if side.model_replicas == model.replicas
        else f", which leaves the model {side.model_replicas} of its {model.replicas} replicas"
    )
    return replace(
        side,
        reason=f"both fit on one node at once ({side.model_gpus} GPU(s) for the model, "
        f"{side.helper_gpus} for the user simulator's server{kept}); the job asks for "
        f"{side.gpus_per_node} GPU(s)",
    )


def plan_user_sim(
    model: Plan,
    model_preset: Preset,
    user_sim: str | None,
    *,
    served: bool,
    gpu: Gpu,
    gpus_per_node: int,
    overhead_correction_gib: float = 0.0,
    apart: str | None = None,
) -> tuple[Plan | None, Placement]:
    """The user simulator named by --user-sim (`user_sim`, a preset name or path) or served
    (`served`: --user-sim-base-url, which wins, as the judge's does): its own layout (None when
    it needs no GPUs of the job's) and its placement beside `model`."""
    other = None if served or user_sim is None else load_preset(user_sim)
    same = other is not None and (other.name, other.model) == (
        model_preset.name,
        model_preset.model,
    )
    layout = None
    if other is not None and not same:
        layout = plan_helper(
            USER_SIM, other, gpu, gpus_per_node=gpus_per_node,
            overhead_correction_gib=overhead_correction_gib,
        )  # fmt: skip
    placement = place_user_sim(
        model, layout, same_engine=same, gpus_per_node=gpus_per_node, apart=apart
    )
    return layout, placement
