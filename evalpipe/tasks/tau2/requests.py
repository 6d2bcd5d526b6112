"""The requests a τ² episode makes, for `plan --estimate`: each step is a request whose prompt
holds the whole conversation before it (the agent's with the policy and tools in every one).
Each request says who answers it: the agent's are the model's work, the user's the user
simulator's share (estimate/usersimwork.py), so each is counted once.

The model's steps are not known before it runs; the estimate assumes τ²'s ground truth (its
task statistics): the user names its problem, each of the task's actions is one step by its
requestor (the agent's, or telecom's user's phone) with a tool result of RESULT_BYTES, the
agent answers in words, and the user's last request stops the episode."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from evalpipe.records.episode import Step, StepRequest
from evalpipe.records.tools import ToolCall, ToolCalls
from evalpipe.tasks.base import Sample

if TYPE_CHECKING:
    from evalpipe.tasks.tau2.task import Tau2Task

RESULT_BYTES = 500  # a domain tool's JSON answer: a reservation, an order, a user's details
WORDS = "x " * 60  # a user's or the agent's message in words


def episode_requests(task: Tau2Task, sample: Sample) -> list[StepRequest]:
    """One episode's requests, in order, the agent's and the user's (the assumptions: the
    module's text)."""
    actions = task.task_of(sample).evaluation_criteria
    planned: list[Step] = [_step(0, "user_sim", WORDS)]
    for action in (actions.actions or []) if actions is not None else []:
        by = "user_sim" if action.requestor == "user" else "model"
        call = ToolCall(name=action.name, arguments=json.dumps(action.arguments))
        planned.append(_step(len(planned), by, "", call))
    planned.append(_step(len(planned), "model", WORDS))
    out = []
    for done in range(len(planned) + 1):
        found = task.next_request(sample, planned[:done])
        if isinstance(found, StepRequest):
            out.append(found)
    return out


def _step(index: int, by: Any, text: str, call: ToolCall | None = None) -> Step:
    calls = ToolCalls(calls=(call,) if call else (), content=text)
    outcome = {"results": [{"content": "r" * RESULT_BYTES, "error": False}]} if call else {}
    return Step(index=index, text=text, prompt_tokens=0, completion_tokens=0, by=by,
                calls=calls, outcome=outcome)  # fmt: skip
