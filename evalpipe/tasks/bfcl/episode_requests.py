"""The requests a BFCL multi-turn entry makes, for `plan --estimate`: each user turn is a request
whose prompt holds every turn, call and tool result before it, so an entry's later requests
carry its whole history (and the function docs, 5.6-7.2k tokens, in every one).

The model's steps are not known before it runs; the estimate assumes (docs/bfcl.md, "Estimate"):
a turn whose ground truth has calls takes two requests (the ground truth's calls in one step,
then a step answering without a call, which ends the turn as BFCL ends it), a turn without calls
one request; each call's result is RESULT_BYTES of tool output."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DatasetError
from evalpipe.records.prompt import Prompt
from evalpipe.tasks.bfcl.child import run_program

PROGRAM = Path(__file__).with_name("turns_program.py")
# A simulated API's answer: BFCL's classes return small dicts ({"result": ...}, a listing).
RESULT_BYTES = 200
_RESULT = ('{"result": "' + "ok " * RESULT_BYTES)[: RESULT_BYTES - 2] + '"}'


@cache
def read_turns(categories: tuple[str, ...]) -> Mapping[str, list[dict[str, Any]]]:
    """Each multi-turn category's entries: {id, turns (each a list of messages), calls (the
    ground truth's per turn)}, read by the package's own code in a child process (once per
    process: an estimate asks again for each figure)."""
    found = run_program(PROGRAM, categories, "multi-turn entries")
    if any(not found.get(c) for c in categories):
        raise DatasetError(f"bfcl-eval has no multi-turn entries for {', '.join(categories)}.")
    return found


def entry_requests(entry: Mapping[str, Any]) -> list[Prompt]:
    """The prompts of one entry's requests, in order (the assumptions: the module's docstring)."""
    history: list[dict[str, str]] = []
    out: list[Prompt] = []
    for messages, calls in zip(entry["turns"], entry["calls"], strict=True):
        history += messages
        out.append(list(history))
        if calls:
            history.append({"role": "assistant", "content": f"[{', '.join(calls)}]"})
            history += [{"role": "tool", "content": _RESULT} for _ in calls]
            out.append(list(history))
    return out


def multi_turn_requests(category: str, limit: int | None = None) -> list[Prompt]:
    """Every request's prompt of the first `limit` entries of multi-turn `category`."""
    entries = read_turns((category,))[category][:limit]
    return [prompt for entry in entries for prompt in entry_requests(entry)]
