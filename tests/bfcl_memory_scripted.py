"""Scripted models for BFCL's memory categories on the fake engine. MemoryModel, in the first
user turn of a scenario's first prerequisite conversation, stores each question's expected
answer (memory_kv: `archival_memory_add(key='answer_N', …)`; memory_vector: one archival entry
`answer_N=…; ` for every N; memory_rec_sum: `memory_append`) and answers every other user turn
in words (no call: BFCL ends the turn). Asked a question, it answers only from what the memory
gives it: memory_kv retrieves `answer_N` and answers with the tool's value, memory_vector
retrieves by similarity (the one entry there is) and reads `answer_N=` from the tool's result,
memory_rec_sum reads `answer_N=` from the memory shown in its prompt. So it scores 1.0 only
where the prerequisites' memory reached the question. SilentModel answers nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bfcl_scripted import last_role

from evalpipe.catalog.preset import load_preset
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.episode import Step
from evalpipe.records.sampling import SamplingSettings
from evalpipe.rundir.layout import RunDir
from evalpipe.tasks.bfcl.install import sandbox_data
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask

CONTEXT = 16_000  # words: the memory function docs and a prerequisite's turns fit
QUESTION = "For your final answer to the user"  # BFCL's agentic answer format, in questions only
VECTOR = "vec_id"  # a parameter of memory_vector's functions alone
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
        vector = VECTOR in text
        kv = "archival_memory_add" in text and not vector
        if QUESTION not in text:  # a prerequisite conversation
            if last_role(text) != "user" or text.count("\nuser: ") != 1:
                return WORDS
            if not any(first in text for first in self.first):
                return WORDS
            return self._store(kv, vector)
        n = next(n for question, n in self.questions.items() if question in text)
        if (kv or vector) and last_role(text) == "user":
            asked = f"key='answer_{n}'" if kv else f"query='answer_{n}'"
            return f"[archival_memory_retrieve({asked})]"
        if kv:
            found = json.loads(text.rpartition("\ntool: ")[2])
            return _answer(found.get("value", "I do not know"))
        # memory_vector: the tool's result; memory_rec_sum: the memory shown in the prompt.
        found = re.search(rf"answer_{n}=([^;]*);", text.rpartition("\ntool: ")[2])
        return _answer(found.group(1) if found else "I do not know")

    def _store(self, kv: bool, vector: bool) -> str:
        if kv:
            calls = [f"archival_memory_add(key='answer_{n}', value={a!r})"
                     for n, a in enumerate(self.answers)]  # fmt: skip
            return f"[{', '.join(calls)}]"
        notes = "".join(f"answer_{n}={a}; " for n, a in enumerate(self.answers))
        if vector:
            return f"[archival_memory_add(text={notes!r})]"
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
    return list(episode_tasks(asked.bfcl_category, asked.version, found, asked.mode,
                              asked.encoder))  # fmt: skip


# BFCL's own inference loop (`inference_multi_turn_prompting`) over the entries named, in order,
# the model's answers given, with its generic OSS handler, or with Qwen's FC handler under the
# registered FC model `model`: each request's chat (and, with the FC handler, the prompt it
# formats of it), each entry's result, and the snapshot each prerequisite conversation flushed,
# its memory files under a folder of its own as `bfcl generate` lays them out.
BFCL_LOOP = """
import json, os, sys, tempfile
from pathlib import Path
from types import SimpleNamespace
given = json.load(sys.stdin)
sys.path[:0] = given["path"]
sys.path.append(given["bfcl"])
root = os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp()
from bfcl_eval.utils import load_dataset_entry, populate_initial_settings_for_memory_test_cases
model = given.get("model")
if model:
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler as Handler
    made = dict(model_name="Qwen/Qwen3-8B", registry_name=model, is_fc_model=True)
else:
    from bfcl_eval.model_handler.local_inference.quick_testing_oss import (
        QuickTestingOSSHandler as Handler)
    made = dict(model_name="evalpipe", registry_name="evalpipe", is_fc_model=False)
usage = SimpleNamespace(prompt_tokens=0, completion_tokens=0)
out = {}
for category, ids in given["entries"].items():
    entries = {e["id"]: e for e in load_dataset_entry(category)}
    for entry_id in ids:
        entry = populate_initial_settings_for_memory_test_cases([entries[entry_id]],
                                                                Path(root) / "result")[0]
        handler = Handler(temperature=0.001, **made)
        answers, chats, prompts = iter(given["answers"][entry_id]), [], []
        def query(data, handler=handler, answers=answers, chats=chats, prompts=prompts):
            chats.append(json.loads(json.dumps(data["message"])))
            if model:
                prompts.append(handler._format_prompt(data["message"], data["function"]))
            return SimpleNamespace(choices=[SimpleNamespace(text=next(answers))],
                                   usage=usage), 0.0
        handler._query_prompting = query
        result, _ = handler.inference_multi_turn_prompting(entry, False, True)
        snapshot = None
        if "prereq" in entry_id:
            found = sorted(Path(root).rglob(entry_id + ".json"))
            snapshot = json.loads(found[0].read_text())
        out[entry_id] = {"chats": chats, "prompts": prompts, "result": result,
                         "snapshot": snapshot}
print(json.dumps(out))
"""


def recorded_steps(run: Path) -> dict[str, list[Step]]:
    """The steps.jsonl of `run`, by sample id, each sample's in order."""
    recorded = [json.loads(x) for x in RunDir(run).steps.read_text().splitlines()]
    by_id: dict[str, list[Step]] = {}
    for row in sorted(recorded, key=lambda r: r["index"]):
        by_id.setdefault(row["sample_id"], []).append(Step.from_dict(row))
    return by_id


def bfcls_loop(
    tasks: Sequence[BfclMultiTurnTask], steps: Mapping[str, Sequence[Step]], model: str | None
) -> dict[str, Any]:
    """BFCL_LOOP's answer, by entry, over `tasks`' entries in BFCL's order (each category's
    conversations, then its questions), given the answers of the recorded `steps`."""
    order: dict[str, list[str]] = {}
    for task in tasks:
        order.setdefault(task.bfcl_category.removesuffix("_prereq"), []).extend(
            e["id"] for e in task.entries
        )
    given = sandbox_data(entries=order, answers={k: [s.text for s in v] for k, v in steps.items()},
                         model=model)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", BFCL_LOOP], input=json.dumps(given),
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def agrees_with_bfcls_loop(tasks: Sequence[BfclMultiTurnTask], run: Path) -> None:
    """The recorded answers of `run` (of `tasks`, prompting mode) given to BFCL's own loop:
    every chat evalpipe sent (next_request from the record, the chain restored from the run
    directory as a resume restores it), every trajectory and every flushed snapshot equal
    BFCL's."""
    by_id = recorded_steps(run)
    for task in tasks:
        ids = {e["id"] for e in task.entries}
        task.restore({k: v for k, v in by_id.items() if k in ids}, ids)
    theirs = bfcls_loop(tasks, by_id, None)
    for task in tasks:
        for sample in task.samples():
            steps = by_id[sample.id]
            ours = [task.next_request(sample, steps[:k]) for k in range(len(steps))]
            assert ours == theirs[sample.id]["chats"], sample.id
            assert task.history(sample, steps).texts == theirs[sample.id]["result"]
            snapshot = theirs[sample.id]["snapshot"]
            if snapshot is not None:
                assert steps[-1].outcome["memory"]["snapshot"] == snapshot
