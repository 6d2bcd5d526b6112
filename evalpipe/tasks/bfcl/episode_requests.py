"""The requests a BFCL multi-turn entry makes, for `plan --estimate`: each user turn is a request
whose prompt holds every turn, call and tool result before it, so an entry's later requests
carry its whole history (and the function docs, 5.6-7.2k tokens, in every one).

The model's steps are not known before it runs; the estimate assumes (docs/bfcl.md, "Estimate"):
a turn whose ground truth has calls takes two requests (the ground truth's calls in one step,
then a step answering without a call, which ends the turn as BFCL ends it), a turn without calls
one request; each call's result is RESULT_BYTES of tool output. In native mode each request
also sends the tools offered at its turn (the held-out ones from their turn on), counted as the
chat template's listing of them (with_tools)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.records.prompt import Prompt, with_tools

# A simulated API's answer: BFCL's classes return small dicts ({"result": ...}, a listing).
RESULT_BYTES = 200
_RESULT = ('{"result": "' + "ok " * RESULT_BYTES)[: RESULT_BYTES - 2] + '"}'


def entry_requests(entry: Mapping[str, Any]) -> list[Prompt]:
    """The prompts of one entry's requests, in order (the assumptions: the module's docstring);
    `entry` as the multi-turn task holds it: its `turns` (messages per turn) and `ground_truth`
    (calls per turn), and in native mode its `tools` and `added_tools`."""
    history: list[dict[str, str]] = []
    tools = list(entry.get("tools", ()))
    out: list[Prompt] = []
    for turn, (messages, calls) in enumerate(zip(entry["turns"], entry["ground_truth"],
                                                 strict=True)):  # fmt: skip
        tools += entry.get("added_tools", {}).get(str(turn), ())
        history += messages
        out.append(with_tools(list(history), tools))
        if calls:
            history.append({"role": "assistant", "content": f"[{', '.join(calls)}]"})
            history += [{"role": "tool", "content": _RESULT} for _ in calls]
            out.append(with_tools(list(history), tools))
    return out


def episode_requests(entries: Sequence[Mapping[str, Any]]) -> list[Prompt]:
    """Every request's prompt of `entries`, entry by entry."""
    return [prompt for entry in entries for prompt in entry_requests(entry)]
