"""A finished episode scored by τ²'s own evaluator: its trajectory converted to τ²'s
`SimulationRun` (messages in order, numbered, timestamped as the Orchestrator's), then
`evaluate_simulation` with EvaluationType.ALL and the task's reward basis. An episode that
ended on a step the engine refused (its history outgrew the context) is what τ²'s runner
records for a failed generation, an agent error: reward 0, as every early end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from math import comb
from typing import TYPE_CHECKING, Any

from evalpipe.records.episode import Ended, Step
from evalpipe.tasks.base import Sample, Scored
from evalpipe.tasks.tau2.trajectory import AGENT_ERROR, Message, replay

if TYPE_CHECKING:
    from evalpipe.tasks.tau2.task import Tau2Task

REWARD = "reward"
# The ends τ² scores; any other is an early stop, reward 0 (evaluate_simulation's rule).
STOPPED = ("agent_stop", "user_stop")
# τ²'s is_successful: a reward within 1e-6 of 1.
SUCCESS_TOLERANCE = 1e-6
START = datetime(2025, 1, 1)


def termination(ended: Ended) -> str:
    """τ²'s TerminationReason for an evalpipe end (a refused step: an agent error)."""
    return AGENT_ERROR if ended.reason == "context_overflow" else ended.reason


def simulation_run(task: Tau2Task, sample: Sample, steps: Sequence[Step], ended: Ended) -> Any:
    """The episode as τ²'s SimulationRun, its messages as τ²'s models."""
    from tau2.data_model.message import AssistantMessage, ToolMessage, UserMessage
    from tau2.data_model.simulation import SimulationRun

    models = {"assistant": AssistantMessage, "user": UserMessage, "tool": ToolMessage}
    messages = []
    for i, m in enumerate(replay(steps, task.limits).messages):
        stamp = (START + timedelta(seconds=i)).isoformat()
        messages.append(models[m["role"]].model_validate({**_fields(m), "turn_idx": i,
                                                          "timestamp": stamp}))  # fmt: skip
    return SimulationRun(
        id=sample.id,
        task_id=task.task_of(sample).id,
        start_time=START.isoformat(),
        end_time=(START + timedelta(seconds=len(messages))).isoformat(),
        duration=0.0,
        termination_reason=termination(ended),
        messages=messages,
        trial=sample.target["trial"],
        seed=task.seed_of(sample),
    )


def _fields(m: Message) -> dict[str, Any]:
    if m["role"] == "tool":
        return m
    calls = m["tool_calls"]
    return {**m, "tool_calls": None if calls is None else [dict(c) for c in calls]}


def reward_info(task: Tau2Task, sample: Sample, steps: Sequence[Step], ended: Ended) -> Any:
    """τ²'s RewardInfo of the episode, as its evaluate_simulation gives it under
    EvaluationType.ALL: its environment, action and communicate evaluators (τ²'s own), each
    reward multiplied in where the task's reward basis names it. evaluate_simulation itself is
    not called: its module imports LiteLLM (seconds, for NL assertions no task uses); the
    tests compare the two on the same trajectories."""
    from tau2.data_model.simulation import RewardInfo
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    simulation = simulation_run(task, sample, steps, ended)
    if termination(ended) not in STOPPED:
        return RewardInfo(reward=0.0, reward_basis=None, info={
            "note": f"Simulation terminated prematurely. Termination reason: {termination(ended)}"
        })  # fmt: skip
    criteria = task.task_of(sample).evaluation_criteria
    if criteria is None:
        return RewardInfo(reward=1.0, reward_basis=None, info={"note": "No evaluation criteria"})
    basis = set(criteria.reward_basis)
    if RewardType.NL_ASSERTION in basis:
        raise ValueError(
            f"τ² task {criteria!r} scores NL assertions, which need an LLM judge; evalpipe does "
            "not run them."
        )
    trajectory = simulation.messages
    given = {"task": task.task_of(sample), "full_trajectory": trajectory}
    env = EnvironmentEvaluator.calculate_reward(
        environment_constructor=task.domain.constructor, solo_mode=False, **given
    )
    action = ActionEvaluator.calculate_reward(**given)
    communicate = CommunicateEvaluator.calculate_reward(**given)
    reward = 1.0
    breakdown: dict[Any, float] = {}
    for kinds, found in (({RewardType.DB, RewardType.ENV_ASSERTION}, env),
                         ({RewardType.ACTION}, action),
                         ({RewardType.COMMUNICATE}, communicate)):  # fmt: skip
        if basis & kinds:
            breakdown.update(found.reward_breakdown or {})
            reward *= found.reward
    return RewardInfo(
        reward=reward,
        db_check=env.db_check,
        env_assertions=env.env_assertions,
        action_checks=action.action_checks,
        communicate_checks=communicate.communicate_checks,
        reward_basis=criteria.reward_basis,
        reward_breakdown=breakdown,
        info={"env": env.info, "nl": None, "communicate": communicate.info,
              "action": action.info},
    )  # fmt: skip


def score_episode(task: Tau2Task, sample: Sample, steps: Sequence[Step], ended: Ended) -> Scored:
    """The episode's reward and its breakdown: each component its task's basis checks (τ²'s
    RewardType lowercased: db, env_assertion, action, communicate), 1.0 or 0.0."""
    info = reward_info(task, sample, steps, ended)
    scores = {REWARD: float(info.reward)}
    for kind, value in (info.reward_breakdown or {}).items():
        scores[str(getattr(kind, "value", kind)).lower()] = float(value)
    return Scored(extracted=(termination(ended),), scores=scores)


def success(reward: float) -> bool:
    return abs(reward - 1.0) <= SUCCESS_TOLERANCE


def pass_hat_k_tasks(rewards: Mapping[str, Sequence[float]]) -> dict[int, list[float]]:
    """τ²'s pass^k of each task for k up to the fewest trials of a task: comb(c, k) /
    comb(n, k) (n trials, c successes)."""
    if not rewards:
        return {}
    most = min(len(r) for r in rewards.values())
    return {
        k: [comb(sum(map(success, r)), k) / comb(len(r), k) for r in rewards.values()]
        for k in range(1, most + 1)
    }


def pass_hat_k(rewards: Mapping[str, Sequence[float]]) -> dict[int, float]:
    """τ²'s pass^k: each task's (pass_hat_k_tasks), averaged over tasks."""
    return {k: sum(tasks) / len(tasks) for k, tasks in pass_hat_k_tasks(rewards).items()}
