"""The user simulator of agent tasks' episodes (τ²-bench): which engine answers its steps.

`--user-sim` naming the run's own preset: the evaluated model's engine answers both sides, its
requests interleaved with the agent's. `--user-sim-base-url URL`: a server, the endpoint engine,
beside the model's engine (`Routed` sends each request to its side by its id, episodes.py's
USER_SIM_ID). Another preset with no URL: `served_user_sim` starts a vLLM server for it on this
machine (run/usersimserver.py) for the run's duration, and the run talks to it as to any server.
A run of agent tasks without a user simulator is refused before anything loads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.catalog.taskrefs import names_agent_tasks
from evalpipe.core.errors import ConfigError
from evalpipe.engine.factory import open_engine
from evalpipe.engine.protocol import Engine, EngineSettings
from evalpipe.records.completion import Completion
from evalpipe.records.request import Request
from evalpipe.run.episodes import USER_SIM_ID
from evalpipe.run.runoptions import RunnerOptions
from evalpipe.run.usersimserver import user_sim_server
from evalpipe.rundir.manifest import UserSimulator
from evalpipe.tasks.base import Task


def check_user_sim(options: RunnerOptions, preset: Preset) -> None:
    """ConfigError, before anything loads, for agent tasks with no user simulator or an unknown
    user-simulator preset."""
    if not names_agent_tasks(options.selection.tasks or ()):
        return
    asked = options.user_sim
    if not asked.named:
        raise ConfigError(
            "Agent tasks (τ²-bench) need a user simulator to talk to the evaluated model: pass "
            f"--user-sim {preset.name} (the run's own model, in its engine), --user-sim PRESET "
            "(another model, served beside it), or --user-sim-base-url URL for a model behind "
            "an OpenAI-compatible server "
            "(docs/agents.md)."
        )
    if asked.endpoint.base_url is None and asked.preset != preset.name:
        load_preset(str(asked.preset))  # an unknown name: the preset's own message


def open_user_sim(options: RunnerOptions, preset: Preset) -> Engine | None:
    """The user simulator's own engine; None when the evaluated model's engine answers it (the
    run's preset), or the run has no agent task or no user simulator."""
    asked = options.user_sim
    if asked.endpoint.base_url is None or not names_agent_tasks(options.selection.tasks or ()):
        return None
    described = load_preset(asked.preset) if asked.preset else preset
    return open_engine("openai", asked.endpoint.apply(described), EngineSettings())


@contextmanager
def served_user_sim(options: RunnerOptions, preset: Preset, log: Path) -> Iterator[RunnerOptions]:
    """`options` with the user simulator's server: for another preset with no URL, a vLLM
    server started for it on this machine while the block runs (its output in `log`)."""
    asked = options.user_sim
    local = asked.endpoint.base_url is None and asked.preset not in (None, preset.name)
    if not local or not names_agent_tasks(options.selection.tasks or ()):
        yield options
        return
    with user_sim_server(str(asked.preset), log=log) as served:
        endpoint = dataclasses.replace(asked.endpoint, base_url=served.base_url, model=served.model)
        user_sim = dataclasses.replace(asked, endpoint=endpoint)
        yield dataclasses.replace(options, user_sim=user_sim)


def user_sim_record(
    options: RunnerOptions, preset: Preset, agents: Sequence[Task]
) -> UserSimulator | None:
    """The manifest's record of the user simulator of `agents` (None: no agent task). Its
    placement: the model's engine for the run's preset; a server for a URL alone; beside the
    model for another preset (a job's server on its own GPUs, or one started here)."""
    asked = options.user_sim
    if not agents or not asked.named:
        return None
    url = asked.endpoint.base_url
    if url is None and asked.preset in (None, preset.name):
        placement, described = "same-engine", preset
    else:
        placement = "server" if asked.preset is None else "side-by-side"
        described = preset if asked.preset is None else load_preset(asked.preset)
    return UserSimulator(
        model=asked.endpoint.model or described.model,
        placement=placement,
        preset=asked.preset,
        base_url=url,
        sampling=agents[0].sampling.to_dict(),
    )


def with_user_sim(engine: Engine, user_sim: Engine | None) -> Engine:
    """The engine the run streams through: the model's, with the user simulator's beside it."""
    return engine if user_sim is None else Routed(engine, user_sim)


class Routed(Engine):
    """The model's engine and the user simulator's as one: a request whose id starts with
    USER_SIM_ID goes to the user simulator, every other one to the model."""

    backend = "routed"

    def __init__(self, model: Engine, user_sim: Engine) -> None:
        self.model = model
        self.user_sim = user_sim

    @property
    def capacity(self) -> int:
        return self.model.capacity + self.user_sim.capacity

    def add(self, requests: Sequence[Request]) -> None:
        users = [r for r in requests if r.id.startswith(USER_SIM_ID)]
        models = [r for r in requests if not r.id.startswith(USER_SIM_ID)]
        if models:
            self.model.add(models)
        if users:
            self.user_sim.add(users)

    def step(self) -> list[Completion]:
        """A step of the model's engine, and of the user simulator's where it has answers
        waiting (or the model has nothing in flight): a server's step waits for an answer,
        which would hold up the model's batch."""
        done: list[Completion] = []
        busy = bool(self.model.in_flight())
        if busy:
            done += self.model.step()
        if self.user_sim.in_flight() and (not busy or self.user_sim.ready()):
            done += self.user_sim.step()
        return done

    def in_flight(self) -> int:
        return self.model.in_flight() + self.user_sim.in_flight()

    def abort(self) -> list[str]:
        return [*self.model.abort(), *self.user_sim.abort()]

    def close(self) -> None:
        try:
            self.model.close()
        finally:
            self.user_sim.close()

    def describe(self) -> dict[str, Any]:
        return {**self.model.describe(), "user_sim": self.user_sim.describe()}

    @property
    def fallback_steps(self) -> list[str]:
        return self.model.fallback_steps

    def slots(self) -> Any:
        return self.model.slots()

    def room(self) -> Any:
        return self.model.room()
