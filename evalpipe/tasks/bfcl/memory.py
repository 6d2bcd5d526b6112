"""BFCL's memory categories (memory_kv, memory_rec_sum) as BFCL runs them: each scenario's
prerequisite conversations first, one after another, each starting from the memory the one
before it left, then the questions, which start from the memory the last of them left
(`_llm_response_generation`'s `depends_on` scheduling, `MemoryAPI._prepare_snapshot`).

A `MemoryChain` is one category's record of its ended prerequisites and the memory each left:
BFCL's snapshot (what `_flush_memory_to_local_file` wrote, recorded in the conversation's last
step's outcome in steps.jsonl, so a resume reads it back) and its content as the next prompt
shows it. The episodes of the category wait (`Blocked`) until their prerequisites ended."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

# The mark episode_entries_program.py leaves where a memory entry's turn 0 shows the memory.
MEMORY_CONTENT = "<<evalpipe:memory_content>>"
PREREQ = "_prereq"  # BFCL's mark on a prerequisite conversation's category and ids


class MemoryChain:
    """Which prerequisite conversations ended, and the memory each left (None: it ended
    without flushing, as BFCL's does when its inference fails)."""

    def __init__(self) -> None:
        self._ended: dict[str, Mapping[str, Any] | None] = {}
        self._lock = threading.Lock()  # ended on the resolving and scoring threads

    def end(self, prereq: str, memory: Mapping[str, Any] | None) -> None:
        with self._lock:
            if memory is not None or prereq not in self._ended:
                self._ended[prereq] = memory

    def waiting(self, depends_on: Sequence[str]) -> tuple[str, ...]:
        """The prerequisites of `depends_on` that have not ended."""
        with self._lock:
            return tuple(d for d in depends_on if d not in self._ended)

    def latest(self, depends_on: Sequence[str]) -> Mapping[str, Any] | None:
        """The memory an entry after `depends_on` starts from: BFCL's latest snapshot, the one
        the last of them to flush left (its prerequisites run one after another)."""
        with self._lock:
            for prereq in reversed(depends_on):
                if self._ended.get(prereq) is not None:
                    return self._ended[prereq]
        return None


def with_memory(entry: Mapping[str, Any], content: str) -> dict[str, Any]:
    """`entry` with the memory's content where BFCL's instruction shows it (its turns, and in
    handler mode its chat and first prompt)."""
    text = json.dumps(dict(entry), ensure_ascii=False)
    found = json.dumps(content, ensure_ascii=False)[1:-1]  # as it sits inside a JSON string
    return json.loads(text.replace(MEMORY_CONTENT, found))
