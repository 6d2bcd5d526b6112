"""A scripted agent and user for τ² tasks, played two ways on the same script: through
evalpipe's runner (ScriptedModel, the fake engine answering both sides from the prompts it is
sent) and through τ²'s own Orchestrator (ScriptedAgent, ScriptedUser), so the two runs'
messages, final databases and rewards can be compared.

The user first performs its task's ground-truth user actions (telecom's phone: actions whose
requestor is the user), one call per step, then names its task and stops (###STOP###) at the
agent's first words. The agent, by its task's mode: "gt" performs the task's ground-truth actions
(evaluation_criteria.actions) one call per step, then says its communicate_info; "idle" does
nothing and says so; "wrong_tool" calls a tool the domain lacks first; "wrong_args" performs
the first action with an argument changed; "loop" repeats the first action for ever (for the
step limit); "empty" answers nothing (an agent error). Run as a program, it evaluates tasks of
a domain into a run directory in this process (the kill -9 test's subject):
python tau2_scripted.py OUT DOMAIN DELAY_S MODES_JSON TASK_ID...."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.preset import load_preset
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.runner import GenerationResult, RunOptions, run_evaluation
from evalpipe.tasks.tau2.domain import Domain
from evalpipe.tasks.tau2.task import Tau2Task
from evalpipe.tasks.tau2.trajectory import Limits

CONTEXT = 200_000  # words: the fake engine counts a word a token; policies are long
HELLO = "Hello, my task is {}."
STOP = "###STOP###"
IDLE = "I cannot help with that."
UNKNOWN_TOOL = "no_such_tool"
_TASK = re.compile(r"Hello, my task is (.+?)\.")


def user_reply(task: Any, results: int, spoke: bool) -> dict[str, Any] | str:
    """The scripted user's next message after `results` results of its own calls."""
    actions = [a for a in (task.evaluation_criteria.actions or []) if a.requestor == "user"]
    if results < len(actions):
        return {"name": actions[results].name, "arguments": actions[results].arguments}
    return STOP if spoke else HELLO.format(task.id)


def agent_reply(task: Any, mode: str, results: int) -> dict[str, Any] | str:
    """The scripted agent's next message after `results` tool results: a call
    ({"name", "arguments"}) or words ("" for none)."""
    criteria = task.evaluation_criteria
    actions = [a for a in (criteria.actions or []) if a.requestor == "assistant"]
    if mode == "empty":
        return ""
    if mode == "loop" and actions:
        return {"name": actions[0].name, "arguments": actions[0].arguments}
    if mode == "wrong_tool" and results == 0:
        return {"name": UNKNOWN_TOOL, "arguments": {"x": 1}}
    if mode == "wrong_args" and results == 0 and actions and actions[0].arguments:
        key = next(iter(actions[0].arguments))
        return {"name": actions[0].name, "arguments": {**actions[0].arguments, key: "WRONG"}}
    if mode in ("gt", "wrong_args") and results < len(actions):
        action = actions[results]
        return {"name": action.name, "arguments": action.arguments}
    if mode == "idle":
        return IDLE
    return " ".join(["Done.", *(criteria.communicate_info or [])])


class ScriptedModel(FakeEngine):
    """Both sides of every episode of `tasks` on the fake engine (see the module's text)."""

    def __init__(self, tasks: Sequence[Any], modes: Mapping[str, str], *,
                 delay_s: float = 0.0) -> None:  # fmt: skip
        super().__init__(load_preset("tiny_random"), EngineSettings(max_model_len=CONTEXT),
                         delay_s=delay_s)  # fmt: skip
        self.by_id = {t.id: t for t in tasks}
        self.by_scenario = {str(t.user_scenario): t for t in tasks}
        self.modes = modes

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        if "<scenario>" in text:  # the user simulator's request
            # The longest scenario the prompt holds: one task's may open with another's.
            task = self.by_scenario[max((s for s in self.by_scenario if s in text), key=len)]
            reply = user_reply(task, text.count("\ntool: "), HELLO.format(task.id) in text)
        else:
            found = _TASK.search(text)
            assert found is not None, "the agent is asked before the user named its task"
            task = self.by_id[found.group(1)]
            reply = agent_reply(task, self.modes.get(task.id, "gt"), text.count("\ntool: "))
        if isinstance(reply, str):
            return reply
        return f"<tool_call>{json.dumps(reply)}</tool_call>"


def subset(domain: str, ids: Sequence[str], limits: Limits | None = None) -> Tau2Task:
    """The domain's task over the τ² tasks named, in that order; their scenarios must differ
    (the scripted user knows its task by its scenario only)."""
    loaded = Domain.load(domain, "base")
    by_id = {t.id: t for t in loaded.tasks}
    loaded.tasks = [by_id[i] for i in ids]
    scenarios = {str(t.user_scenario) for t in loaded.tasks}
    assert len(scenarios) == len(ids), f"tasks {ids} share a scenario"
    return Tau2Task(domain=loaded, limits=limits or Limits())


def run(out: Path, task: Tau2Task, modes: Mapping[str, str], delay_s: float = 0.0,
        ) -> GenerationResult:  # fmt: skip
    """Every episode of `task` with the scripted agent and user through evalpipe's runner."""
    model = ScriptedModel(task.domain.tasks, modes, delay_s=delay_s)
    return run_evaluation(lambda settings: model, [task], out, preset=load_preset("tiny_random"),
                          options=RunOptions(backend="fake"))  # fmt: skip


def orchestrated(domain: str, task: Any, mode: str, limits: Limits) -> tuple[Any, Any]:
    """τ²'s Orchestrator running the same script on `task`: its SimulationRun (reward filled
    in by τ²'s evaluate_simulation, or an agent error's where its loop raises on an empty
    message, as τ²'s run_tasks records one) and its environment."""
    from tau2.agent.base import LocalAgent
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.orchestrator.orchestrator import Orchestrator
    from tau2.registry import registry
    from tau2.user.base import BaseUser, UserState

    class ScriptedAgent(LocalAgent):
        def get_init_state(self, message_history: Any = None) -> list[Any]:
            return list(message_history or [])

        def generate_next_message(self, message: Any, state: list[Any]) -> Any:
            state.append(message)
            results = sum(isinstance(m, ToolMessage) for m in state)
            reply = agent_reply(task, mode, results)
            if isinstance(reply, str):
                answer = AssistantMessage(role="assistant", content=reply or None)
            else:
                call = ToolCall(id=f"call_{len(state)}", requestor="assistant", **reply)
                answer = AssistantMessage(role="assistant", content=None, tool_calls=[call])
            state.append(answer)
            return answer, state

    class ScriptedUser(BaseUser):
        def get_init_state(self, message_history: Any = None) -> Any:
            return UserState(system_messages=[], messages=list(message_history or []))

        def generate_next_message(self, message: Any, state: Any) -> Any:
            state.messages += message.tool_messages if hasattr(message, "tool_messages") else [
                message]  # fmt: skip
            results = sum(isinstance(m, ToolMessage) for m in state.messages)
            spoke = any(isinstance(m, UserMessage) and not m.tool_calls for m in state.messages)
            reply = user_reply(task, results, spoke)
            if isinstance(reply, str):
                answer = UserMessage(role="user", content=reply)
            else:
                call = ToolCall(id=f"user_{len(state.messages)}", requestor="user", **reply)
                answer = UserMessage(role="user", content=None, tool_calls=[call])
            state.messages.append(answer)
            return answer, state

        @classmethod
        def is_stop(cls, message: Any) -> bool:
            return STOP in (message.content or "")

        def set_seed(self, seed: int) -> None:
            pass

    environment = registry.get_env_constructor(domain)()
    agent = ScriptedAgent(tools=environment.get_tools(), domain_policy=environment.get_policy())
    orchestrator = Orchestrator(
        domain=domain, agent=agent, user=ScriptedUser(), environment=environment, task=task,
        max_steps=limits.max_steps, max_errors=limits.max_errors,
    )  # fmt: skip
    try:
        simulation = orchestrator.run()
    except ValueError:  # an empty message: τ²'s run_tasks records an agent error
        simulation = SimulationRun(id="failed", task_id=task.id, start_time="", end_time="",
                                   duration=0.0, messages=[],
                                   termination_reason=TerminationReason.AGENT_ERROR)  # fmt: skip
    simulation.reward_info = evaluate_simulation(
        simulation=simulation, task=task, evaluation_type=EvaluationType.ALL, solo_mode=False,
        domain=domain,
    )  # fmt: skip
    return simulation, environment


if __name__ == "__main__":
    out, domain, delay, modes = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
    result = run(out, subset(domain, sys.argv[5:]), json.loads(modes), delay_s=delay)
    sys.exit(0 if result.status == "complete" else 1)
