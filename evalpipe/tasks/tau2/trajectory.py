"""An episode's recorded steps read as τ²'s Orchestrator holds a simulation: its messages in
τ²'s format (plain dicts of its message models' fields), who speaks next, and how it ended, by
τ²'s rules: the agent greets first; a message with neither text nor calls is an error of its
sender; the user ends it with a stop token; each generation and each batch of tool executions
is one step, and after each that is not a call for the environment the step and error limits
are checked (a limit overrides the user's stop, as the Orchestrator's loop does). Pure: no τ²
import, so the next request is known on the loop's thread and again on resume."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.records.episode import Answerer, Ended, Step

# τ²'s words (tau2/orchestrator/orchestrator.py, tau2/user/base.py, TerminationReason).
GREETING = "Hi! How can I help you today?"
USER_STOPS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
USER_STOP = "user_stop"
MAX_STEPS = "max_steps"
TOO_MANY_ERRORS = "too_many_errors"
AGENT_ERROR = "agent_error"
USER_ERROR = "user_error"

Message = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """τ²'s limits of one simulation (its defaults: run.py's DEFAULT_MAX_STEPS/ERRORS)."""

    max_steps: int = 200
    max_errors: int = 10


@dataclass(frozen=True, kw_only=True)
class Trajectory:
    """The simulation so far: τ²'s messages, who answers next, and its end (None: going on)."""

    messages: list[Message]
    next_by: Answerer
    ended: Ended | None = None


def message_of(step: Step) -> Message | None:
    """The τ² message a step's answer is (assistant for the model, user for the user
    simulator): its text (None when empty) and its calls, each with an id of its step; None
    when τ² refuses it: no text and no call, or a call whose arguments are not a JSON object."""
    parsed = step.calls
    content = parsed.content if parsed is not None else step.text
    calls = []
    for i, call in enumerate(parsed.calls if parsed is not None else ()):
        try:
            arguments = call.args()
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        requestor = "assistant" if step.by == "model" else "user"
        calls.append({"id": step.call_id(i), "name": call.name,
                      "arguments": arguments, "requestor": requestor})  # fmt: skip
    text = content if content.strip() else None
    if text is None and not calls:
        return None
    role = "assistant" if step.by == "model" else "user"
    return {"role": role, "content": text, "tool_calls": calls or None}


def replay(steps: Sequence[Step], limits: Limits) -> Trajectory:
    """The steps replayed through τ²'s Orchestrator loop (see the module's text)."""
    messages: list[Message] = [{"role": "assistant", "content": GREETING, "tool_calls": None}]
    count = errors = 0
    next_by: Answerer = "user_sim"
    for step in steps:
        message = message_of(step)
        if message is None:
            reason = AGENT_ERROR if step.by == "model" else USER_ERROR
            return Trajectory(messages=messages, next_by=next_by, ended=Ended(reason=reason))
        messages.append(message)
        count += 1
        calls = message["tool_calls"] or []
        stop = False
        if calls:
            results = step.outcome.get("results") or []
            for call, result in zip(calls, results, strict=True):
                messages.append(
                    {"role": "tool", "id": call["id"], "requestor": call["requestor"],
                     "content": result["content"], "error": result["error"]}
                )  # fmt: skip
                errors += bool(result["error"])
            count += 1
        else:
            next_by = "user_sim" if step.by == "model" else "model"
            stop = step.by == "user_sim" and any(s in message["content"] for s in USER_STOPS)
        reason = USER_STOP if stop else None
        if count >= limits.max_steps:
            reason = MAX_STEPS
        if errors >= limits.max_errors:
            reason = TOO_MANY_ERRORS
        if reason is not None:
            return Trajectory(messages=messages, next_by=next_by, ended=Ended(reason=reason))
    return Trajectory(messages=messages, next_by=next_by)


def agent_view(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The agent's chat as τ²'s LLMAgent sends it (LiteLLM's format): its system prompt, its
    own messages, the user's words and its own calls' results; the user's calls and their
    results it never sees."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m["role"] == "assistant":
            chat.append(_speaker("assistant", m))
        elif m["role"] == "user" and not m["tool_calls"]:
            chat.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool" and m["requestor"] == "assistant":
            chat.append(_result(m))
    return chat


def user_view(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The user simulator's chat as τ²'s UserSimulator sends it: roles flipped (its own
    messages as the assistant's, the agent's words as the user's), its own calls' results; the
    agent's calls and their results it never sees."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m["role"] == "user":
            chat.append(_speaker("assistant", m))
        elif m["role"] == "assistant" and not m["tool_calls"]:
            chat.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool" and m["requestor"] == "user":
            chat.append(_result(m))
    return chat


def _speaker(role: str, m: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": role, "content": m["content"]}
    if m["tool_calls"]:
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"],
                                           "arguments": json.dumps(c["arguments"])}}
                             for c in m["tool_calls"]]  # fmt: skip
    return out


def _result(m: Mapping[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "content": m["content"], "tool_call_id": m["id"]}
