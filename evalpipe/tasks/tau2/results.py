"""The τ² results document of a completed run: per domain the episodes, the average reward and
pass^k (τ²'s, over the trials of each task) with its interval over tasks (core/intervals.py, as
any mean over samples gets one), and the overall (every episode of every domain, averaged over
episodes, as τ²'s leaderboard averages a domain's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalpipe.core.intervals import interval_fields
from evalpipe.tasks.kindbase import FinishedScores
from evalpipe.tasks.tau2.scoring import REWARD, pass_hat_k, pass_hat_k_tasks
from evalpipe.tasks.tau2.task import PREFIX


def results_document(names: Sequence[str], scores: FinishedScores) -> dict[str, Any]:
    domains = {}
    every: list[float] = []
    for name in names:
        rewards: dict[str, list[float]] = {}
        for sample_id, values in scores.get(name, ()):
            task_id = sample_id.rpartition("#")[0]
            rewards.setdefault(task_id, []).append(float(values.get(REWARD, 0.0)))
        flat = [r for trials in rewards.values() for r in trials]
        every += flat
        domains[name.removeprefix(PREFIX)] = {
            "episodes": len(flat),
            "tasks": len(rewards),
            "avg_reward": sum(flat) / len(flat) if flat else None,
            "pass_hat_k": {str(k): v for k, v in pass_hat_k(rewards).items()},
            "pass_hat_k_ci": {
                str(k): interval_fields(v) for k, v in pass_hat_k_tasks(rewards).items()
            },
        }
    return {
        "domains": domains,
        "overall": {"episodes": len(every),
                    "avg_reward": sum(every) / len(every) if every else None},
    }  # fmt: skip
