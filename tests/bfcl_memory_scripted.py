"""Scripted models for BFCL's memory categories on the fake engine. MemoryModel, in the first
user turn of a scenario's first prerequisite conversation, stores each question's expected
answer (memory_kv: `archival_memory_add(key='answer_N', …)`; memory_rec_sum: `memory_append`)
and answers every other user turn in words (no call: BFCL ends the turn). Asked a question, it
answers only from what the memory gives it: memory_kv retrieves `answer_N` and answers with the
tool's value, memory_rec_sum reads `answer_N=` from the memory shown in its prompt. So it scores
1.0 only where the prerequisites' memory reached the question. SilentModel answers nothing."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from bfcl_scripted import last_role

from evalpipe.catalog.preset import load_preset
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask

CONTEXT = 16_000  # words: the memory function docs and a prerequisite's turns fit
QUESTION = "For your final answer to the user"  # BFCL's agentic answer format, in questions only
WORDS = "Noted."


class MemoryModel(FakeEngine):
    """See the module's text; `questions` are the question tasks' entries (memory_kv's and
    memory_rec_sum's), `first` the first user message of each scenario's first prerequisite."""

    def __init__(self, questions: Sequence[Mapping[str, Any]], first: Sequence[str],
                 stop_at: str | None = None, stop: Any = None) -> None:  # fmt: skip
        super().__init__(load_preset("tiny_random"), EngineSettings(max_model_len=CONTEXT))
        self.questions = {q["turns"][0][-1]["content"]: n for n, q in enumerate(questions)}
        self.answers = [q["ground_truth"][0] for q in questions]
        self.first = tuple(first)
        # The stop: once a prompt holding `stop_at` is asked, `stop.requested` is set.
        self.stop_at, self.stop = stop_at, stop

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        if self.stop_at is not None and self.stop_at in text:
            self.stop.requested = "stopped between prerequisites"
        kv = "archival_memory_add" in text
        if QUESTION not in text:  # a prerequisite conversation
            if last_role(text) != "user" or text.count("\nuser: ") != 1:
                return WORDS
            if not any(first in text for first in self.first):
                return WORDS
            return self._store(kv)
        n = next(n for question, n in self.questions.items() if question in text)
        if kv and last_role(text) == "user":
            return f"[archival_memory_retrieve(key='answer_{n}')]"
        if kv:
            found = json.loads(text.rpartition("\ntool: ")[2])
            return _answer(found.get("value", "I do not know"))
        found = re.search(rf"answer_{n}=([^;]*);", text)
        return _answer(found.group(1) if found else "I do not know")

    def _store(self, kv: bool) -> str:
        if kv:
            calls = [f"archival_memory_add(key='answer_{n}', value={a!r})"
                     for n, a in enumerate(self.answers)]  # fmt: skip
            return f"[{', '.join(calls)}]"
        notes = "".join(f"answer_{n}={a}; " for n, a in enumerate(self.answers))
        return f"[memory_append(text={notes!r})]"


def _answer(value: str) -> str:
    return str({"answer": value, "context": "from my memory"})


class SilentModel(FakeEngine):
    """Answers every request with nothing: no call, no answer."""

    def __init__(self) -> None:
        super().__init__(load_preset("tiny_random"), EngineSettings(max_model_len=CONTEXT))

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        return ""


def chain(tasks: Sequence[BfclMultiTurnTask], scenario: str, prereqs: int,
          questions: int) -> list[BfclMultiTurnTask]:  # fmt: skip
    """A memory category's two tasks over `scenario`'s first `prereqs` prerequisite
    conversations and first `questions` questions, which wait for those prerequisites only,
    sharing a fresh chain (a run of a few entries: BFCL's chains run 5-10 conversations)."""
    from evalpipe.tasks.bfcl.kind import episode_tasks

    pre, asked = tasks
    kept = [e for e in pre.entries if e["scenario"] == scenario][:prereqs]
    ids = [e["id"] for e in kept]
    found = [{**e, "depends_on": [d for d in e["depends_on"] if d in ids]} for e in kept]
    found += [{**e, "depends_on": ids} for e in asked.entries
              if e["scenario"] == scenario][:questions]  # fmt: skip
    return list(episode_tasks(asked.bfcl_category, asked.version, found, asked.mode))
