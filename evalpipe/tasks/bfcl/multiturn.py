"""One BFCL multi-turn category as an evalpipe task of episodes (run/episodes.py), as BFCL's
`inference_multi_turn_prompting` runs an entry with a local handler: in prompting mode its
generic OSS handler (the chat rendered with the model's template), in handler mode the
registered model's own (Qwen's FC handler, …: its `_format_prompt` text, sent as it is); or, in
native mode, as `inference_multi_turn_FC` runs it with BFCL's OpenAI FC handler: the functions
as chat tools (the held-out ones added at their turn), the calls the engine parsed. Each
step's completion is decoded and its calls executed against BFCL's simulated APIs in the
sandbox (steps_program.py), the results go back as tool messages (as the handler's
`_add_execution_results_prompting` or `_add_execution_results_FC`, with the calls' ids, adds
them) and the next step is generated; a turn ends when a completion decodes to no call, the
next user turn follows, and an entry whose turn takes more steps than BFCL's limit is forced to
quit. The finished trajectory is scored by BFCL's multi-turn checker (state and response
checks), in the sandbox.

A memory category runs the same way (memory.py): its prerequisite conversations as one task
(`bfcl_memory_kv_prereq`, each scored by whether it left a memory), its questions as another,
each episode `Blocked` until its prerequisites ended and then started from the memory they left;
the questions are scored by BFCL's agentic checker (the last answer holds an expected value).
memory_vector's steps load its encoder from the user's hub cache (vector.py).

A web search category runs the same way, scored by the agentic checker too; its calls reach the
live web, so each step is decoded in the sandbox without network, then its calls gated and
executed in a networked one (websearch.py, steps_program.py)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.catalog.taskrefs import BFCL_WEB_SEARCH
from evalpipe.records.episode import Blocked, Ended, Step, StepRequest
from evalpipe.records.prompt import Prompt, Rendered
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCalls
from evalpipe.sandbox.exchange import run_exchange
from evalpipe.sandbox.pool import SandboxResult
from evalpipe.tasks.base import Sample, Scored, check_limit
from evalpipe.tasks.bfcl.checking import PER_TEXT_S, SANDBOX_FAILED, START_S, check_in_sandbox
from evalpipe.tasks.bfcl.episode_requests import episode_requests
from evalpipe.tasks.bfcl.install import sandbox_data
from evalpipe.tasks.bfcl.memory import PREREQ, MemoryChain, with_memory
from evalpipe.tasks.bfcl.modes import PROMPTING, Mode
from evalpipe.tasks.bfcl.task import PREFIX, SAMPLING, fc_response, scored
from evalpipe.tasks.bfcl.vector import Encoder
from evalpipe.tasks.bfcl.websearch import REFUSED_CALLS, certificates, web_network

log = logging.getLogger(__name__)

PROGRAM = Path(__file__).with_name("steps_program.py")
# Why an episode ended besides its last turn ("finished"): BFCL's forced quit, or a step whose
# calls broke the sandboxed process (BFCL's own run would have died with it).
STEP_LIMIT = "step_limit"
CHECKED = ("finished", STEP_LIMIT)  # ends whose trajectory BFCL's checker reads
# What a prerequisite conversation is scored by: it left a memory (BFCL scores none of them).
LEFT_MEMORY = "left_memory"


@dataclass(frozen=True, kw_only=True)
class History:
    """An entry's recorded steps read as BFCL's handler holds them: the chat so far (the
    handler's messages), each turn's step texts (its model_result: the handler's reading of
    each completion; in native mode its FC response), the turn the next step belongs to, and
    the end."""

    messages: list[dict[str, Any]]
    texts: list[list[Any]]
    ended: Ended | None = None
    count: int = 0  # the steps of the current turn that made calls

    def ends_at(self, entry: Mapping[str, Any]) -> dict[str, bool]:
        """Whether the next step ends the entry, if it makes calls (BFCL's step limit) and if
        it makes none (in the last turn)."""
        return {"call": self.count + 1 > entry["step_limit"],
                "no_call": self.turn == len(entry["turns"]) - 1}  # fmt: skip

    @property
    def turn(self) -> int:
        return len(self.texts) - 1


@dataclass(kw_only=True)
class BfclMultiTurnTask:
    """A BFCL multi-turn category (`bfcl_multi_turn_base`, …) over its entries as bfcl-eval
    loads them (episode_entries_program.py)."""

    bfcl_category: str
    version: str
    entries: Sequence[Mapping[str, Any]] = field(repr=False)
    mode: Mode = PROMPTING
    sampling: SamplingSettings = SAMPLING
    category: str = "bfcl"
    runs_code = True  # BFCL's executor evals the model's calls: the sandbox must be checked
    # A memory category's prerequisites (shared by its two tasks; memory.py), and for its
    # prerequisites' task the questions' entries, whose --limit decides which of them run.
    chain: MemoryChain | None = field(default=None, repr=False)
    questions: Sequence[Mapping[str, Any]] = field(default=(), repr=False)
    # memory_vector's encoder as the hub cache held it at load (vector.py).
    encoder: Encoder | None = None

    def __post_init__(self) -> None:
        self._by_id = {e["id"]: e for e in self.entries}
        self._with_memory: dict[str, dict[str, Any]] = {}  # entries whose memory is known
        # Handler mode: the next prompt the sandbox formatted with each resolved step, by
        # (entry, steps recorded); a resumed entry's is formatted again (next_request).
        self._prompts: dict[tuple[str, int], str] = {}

    @property
    def _handler(self) -> bool:
        return self.mode.name == "handler"

    @property
    def _native(self) -> bool:
        return self.mode.name == "native"

    @property
    def _web(self) -> bool:
        return self.bfcl_category in BFCL_WEB_SEARCH

    @property
    def gives_tools(self) -> bool:
        return self._native

    @property
    def kept_whole(self) -> str | None:
        if self.chain is None:
            return None
        return ("a memory category's questions start from the memory its prerequisite "
                "conversations leave, so both run in one run, every one of them")  # fmt: skip

    @property
    def name(self) -> str:
        return PREFIX + self.bfcl_category

    def definition(self) -> dict[str, Any]:
        step_limit = self.entries[0]["step_limit"] if self.entries else None
        encoder = {"encoder": self.encoder.name} if self.encoder else {}
        return {"kind": "bfcl", "bfcl_eval": self.version, "category": self.bfcl_category,
                **self.mode.to_dict(), **encoder,
                "entries": len(self.entries), "step_limit": step_limit}  # fmt: skip

    @property
    def _prereq(self) -> bool:
        return self.bfcl_category.endswith(PREREQ)

    def _entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        """The first `limit` entries; a prerequisites' task's, those the first `limit`
        questions wait for."""
        check_limit(limit)
        if not self._prereq:
            return list(self.entries[:limit])
        needed = {d for question in self.questions[:limit] for d in question["depends_on"]}
        return [e for e in self.entries if e["id"] in needed]

    def samples(self, limit: int | None = None) -> list[Sample]:
        return [Sample(id=e["id"], prompt=Rendered(e["prompt"]) if self._handler else e["turns"][0],
                       tools=tuple(e["tools"]) if self._native else (),
                       target={"ground_truth": e["ground_truth"]})
                for e in self._entries(limit)]  # fmt: skip

    def request_prompts(self, limit: int | None) -> list[Prompt]:
        """The requests the first `limit` entries make, for `plan --estimate` (a memory or
        web search entry's ground truth is answers, not calls: a request per turn)."""
        entries = self._entries(limit)
        if self.chain is not None or self._web:
            entries = [{**e, "ground_truth": [[] for _ in e["turns"]]} for e in entries]
        return episode_requests(entries)

    def _entry(self, sample_id: str) -> Mapping[str, Any]:
        """The entry as its episode runs it: a memory entry's with the memory its
        prerequisites left (asked once they ended: next_request waits for them)."""
        entry = self._by_id[sample_id]
        if self.chain is None:
            return entry
        if sample_id not in self._with_memory:
            memory = self.chain.latest(entry["depends_on"])
            content = memory["content"] if memory else entry["empty_memory"]
            self._with_memory[sample_id] = with_memory(entry, content)
        return self._with_memory[sample_id]

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        raise TypeError(f"{self.name} scores whole episodes (score_episodes), not texts.")

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        raise TypeError(f"{self.name} scores whole episodes (score_episodes), not texts.")

    def history(self, sample: Sample, steps: Sequence[Step]) -> History:
        """The steps replayed through BFCL's loop: after a step with calls its results follow
        and the step count of the turn grows (over the limit: forced quit); after one without,
        the next turn's user message, or the end after the last turn. In handler mode the
        messages each step added are the handler's own (recorded in its outcome); in native
        mode the assistant's message holds its parsed calls, each result answers its call's
        id."""
        return self._history(sample.id, steps)

    def _history(self, sample_id: str, steps: Sequence[Step]) -> History:
        entry = self._entry(sample_id)
        turns = entry["turns"]
        messages = list(entry["chat"] if self._handler else turns[0])
        texts: list[list[Any]] = [[]]
        count = 0
        for step in steps:
            outcome = step.outcome
            read = fc_response(step_calls(step)) if self._native else outcome.get("response")
            texts[-1].append(step.text if read is None else read)
            if self._native:
                messages.append(_assistant(step))
            elif self._handler:
                messages += outcome.get("messages", [])
            else:
                messages.append({"role": "assistant", "content": step.text})
            if outcome.get(SANDBOX_FAILED):
                return History(messages=messages, texts=texts, ended=Ended(reason=SANDBOX_FAILED))
            if outcome["calls"]:
                if self._native:  # BFCL zips the results with the calls' ids
                    messages += [{"role": "tool", "content": result,
                                  "tool_call_id": step.call_id(i)}
                                 for i, result in enumerate(outcome["results"])]  # fmt: skip
                elif not self._handler:
                    messages += [{"role": "tool", "name": call, "content": result}
                                 for call, result in zip(outcome["calls"], outcome["results"],
                                                         strict=True)]  # fmt: skip
                count += 1
                if count > entry["step_limit"]:
                    return History(messages=messages, texts=texts, ended=Ended(reason=STEP_LIMIT))
                continue
            if len(texts) == len(turns):
                return History(messages=messages, texts=texts, ended=Ended(reason="finished"))
            messages += turns[len(texts)]
            texts.append([])
            count = 0
        return History(messages=messages, texts=texts, count=count)

    def next_request(
        self, sample: Sample, steps: Sequence[Step]
    ) -> Prompt | StepRequest | Ended | Blocked:
        if self.chain is not None and not steps:
            waiting = self.chain.waiting(self._by_id[sample.id]["depends_on"])
            if waiting:
                return Blocked(after=waiting)
        found = self.history(sample, steps)
        if self._native:
            tools = self.tools(sample.id, found.turn)
            return found.ended or StepRequest(prompt=found.messages, tools=tools)
        prompt = self._prompts.pop((sample.id, len(steps)), None)
        if found.ended or not self._handler:
            return found.ended or found.messages
        if not steps:
            return Rendered(self._entry(sample.id)["prompt"])
        if prompt is None:  # resumed: the handler formats the recorded chat again
            answer, result = self._exchange([self._item(sample, found, None)])
            if answer is None:
                log.warning("BFCL %s: formatting its next prompt in the sandbox ended %s: %s",
                            sample.id, result.status, result.detail)  # fmt: skip
                return Ended(reason=SANDBOX_FAILED)
            prompt = answer[0]["prompt"]
        return Rendered(prompt)

    def tools(self, sample_id: str, turn: int) -> tuple[dict[str, Any], ...]:
        """Native mode: the tools offered at `turn`, the entry's functions with the held-out
        ones of the turns so far added, in BFCL's order (it extends the functions at a
        held-out turn and compiles them again)."""
        entry = self._by_id[sample_id]
        added = entry["added_tools"]
        return (*entry["tools"], *(t for i in range(turn + 1) for t in added.get(str(i), ())))

    def _item(self, sample: Sample, found: History, text: Any) -> dict[str, Any]:
        """What steps_program.py is sent of a step of `sample` after its history `found`."""
        entry = self._entry(sample.id)
        item = {"category": self.bfcl_category, "id": sample.id, "text": text,
                "initial_config": entry["initial_config"],
                "involved_classes": entry["involved_classes"]}  # fmt: skip
        if self.chain is not None:
            memory = self.chain.latest(entry["depends_on"])
            item["memory"] = {"scenario": entry["scenario"], "prereq": self._prereq,
                              "snapshot": memory["snapshot"] if memory else None,
                              "flush_if": found.ends_at(entry)}  # fmt: skip
        if self._handler:
            turns = entry["turns"]
            after = turns[found.turn + 1] if found.turn + 1 < len(turns) else None
            item |= {"functions": entry["functions"], "chat": found.messages, "next_turn": after}
        return item

    def _exchange(self, items: Sequence[Mapping[str, Any]]) -> tuple[Any, SandboxResult]:
        """steps_program.py's answer for `items` (None when it did not end cleanly), and how
        its sandboxed process ended. Web search steps (with text) are decoded without the
        network first, then gated and executed with it."""
        if self._web and items and items[0]["text"] is not None:
            decoded, result = self._run(items, phase="decode")
            if not _decoded(decoded, len(items)):
                return None, result
            items = [{**item, "decoded": d} for item, d in zip(items, decoded, strict=True)]
            return self._run(items, network=web_network(), certificates=certificates())
        return self._run(items)

    def _run(self, items: Sequence[Mapping[str, Any]], **how: Any) -> tuple[Any, SandboxResult]:
        """One sandboxed process over `items`; memory_vector's is shown the encoder's folder in
        the hub cache, which it reads offline."""
        network = how.pop("network", None)
        data = sandbox_data(mode=self.mode.name, model=self.mode.checker_model,
                            config=dict(self.mode.config), items=list(items),
                            hub=self.encoder.hub if self.encoder else None, **how)  # fmt: skip
        return run_exchange(PROGRAM.read_text(), data, network=network,
                            timeout_s=START_S + PER_TEXT_S * len(items),
                            shown=(self.encoder.repo,) if self.encoder else ())  # fmt: skip

    def resolve(self, items: Sequence[tuple[Sample, Sequence[Step], Step]]) -> list[dict[str, Any]]:
        """Each new step decoded and its calls executed in the sandbox, after the entry's
        recorded calls are replayed there (steps_program.py). A batch that fails is resolved
        again one step at a time, so a step whose calls break the process ends its own entry
        only (SANDBOX_FAILED, the sandbox's words recorded). In handler mode the next prompt
        the handler formatted is kept for next_request, not recorded (the chat is)."""
        given, turns = [], []
        for sample, steps, new in items:
            found = self.history(sample, steps)
            # Web search keeps no state to replay (steps_program.py), and would fetch again.
            replay = [{"calls": s.outcome["calls"], "results": s.outcome["results"]}
                      for s in steps if s.outcome.get("calls") and not self._web]  # fmt: skip
            text = fc_response(step_calls(new)) if self._native else new.text
            given.append({**self._item(sample, found, text), "replay": replay})
            turns.append(found.turn)
        answer, result = self._exchange(given)
        if answer is not None:
            for (sample, steps, _), found in zip(items, answer, strict=True):
                if not found["replay_equal"]:
                    log.warning(
                        "BFCL %s: replaying its recorded calls gave other results than "
                        "were recorded; its state may differ from BFCL's",
                        sample.id,
                    )
                prompt = found.pop("prompt", None)
                if prompt is not None:
                    self._prompts[(sample.id, len(steps) + 1)] = prompt
            outcomes = [{"turn": turn, **found} for turn, found in zip(turns, answer, strict=True)]
            for (sample, steps, new), outcome in zip(items, outcomes, strict=True):
                self._ended(sample.id, [*steps, dataclasses.replace(new, outcome=outcome)])
            return outcomes
        if len(items) > 1:
            return [found for item in items for found in self.resolve([item])]
        sample, steps, new = items[0]
        failed = {"turn": self.history(sample, steps).turn, "calls": [], "results": [],
                  SANDBOX_FAILED: f"{result.status}: {result.detail}"}  # fmt: skip
        self._ended(sample.id, [*steps, dataclasses.replace(new, outcome=failed)])
        return [failed]

    def _ended(self, sample_id: str, steps: Sequence[Step]) -> None:
        """A prerequisite conversation whose `steps` end it ends in the chain, with the memory
        its last step flushed (none when it broke the sandbox, as BFCL's would have died)."""
        if self._prereq and self.chain is not None and self._history(sample_id, steps).ended:
            self.chain.end(sample_id, steps[-1].outcome.get("memory"))

    def restore(self, steps: Mapping[str, Sequence[Step]], written: AbstractSet[str]) -> None:
        """A resumed run's prerequisite conversations that ended before it (written, or their
        recorded steps end them) end in the chain, with the memory their last step left."""
        for entry in self.entries if self._prereq and self.chain is not None else ():
            recorded = steps.get(entry["id"], ())
            if entry["id"] in written:
                last = recorded[-1].outcome.get("memory") if recorded else None
                self.chain.end(entry["id"], last)  # type: ignore[union-attr]
            elif recorded:
                self._ended(entry["id"], recorded)

    def score_episodes(self, items: Sequence[tuple[Sample, Sequence[Step], Ended]]) -> list[Scored]:
        """BFCL's multi-turn checker on each trajectory (per turn, per step, the model's text),
        as `bfcl evaluate` reads a result file; `step_limit` counts the entries forced to quit.
        An entry that ended on a refused step (its history outgrew the context) is what BFCL
        records for a failed inference, a string, which its evaluation fails before anything
        else (multi_turn:inference_error); one whose calls broke the sandbox fails as
        SANDBOX_FAILED. Neither needs the checker's process. Metrics: accuracy, sandbox_failed
        and step_limit; for web search also refused_calls (its calls the gate did not let
        execute); in native mode also unparsed, the entry's steps whose answer began a
        tool call the preset's parser could not read (each such step ended its turn, as the
        answer in words vLLM's server hands back ends BFCL's). A memory question is checked by
        BFCL's agentic checker; a prerequisite conversation, which BFCL does not score, by
        whether it left a memory (LEFT_MEMORY), and it ends in the chain (one whose step was
        refused ends here)."""
        if self._prereq:
            return [self._left_memory(sample, steps) for sample, steps, _ in items]
        checks = [{"category": self.bfcl_category, "id": sample.id,
                   "initial_config": self._by_id[sample.id]["initial_config"],
                   "involved_classes": self._by_id[sample.id]["involved_classes"],
                   "ground_truth": sample.target["ground_truth"],
                   "texts": [self.history(sample, steps).texts]}
                  for sample, steps, ended in items if ended.reason in CHECKED]  # fmt: skip
        verdicts = iter(check_in_sandbox(self.mode, checks) if checks else [])
        out = []
        for _, steps, ended in items:
            if ended.reason in CHECKED:
                found = next(verdicts)
            else:
                failed = SANDBOX_FAILED if ended.reason == SANDBOX_FAILED else self._error
                found = [{"valid": False, "error_type": failed}]
            result = scored(found)
            # `unparsed` counts single-turn decoder errors; a trajectory's steps in words are
            # how its turns end, so in BFCL's modes it has none.
            if self._native:
                result.scores["unparsed"] = float(sum(bool(step_calls(s).unparsed) for s in steps))
            else:
                del result.scores["unparsed"]
            result.scores[STEP_LIMIT] = float(ended.reason == STEP_LIMIT)
            if self._web:
                refused = sum(len(s.outcome.get("refused", ())) for s in steps)
                result.scores[REFUSED_CALLS] = float(refused)
            out.append(result)
        return out

    @property
    def _error(self) -> str:
        """BFCL's error type for an entry whose inference failed."""
        agentic = self.chain is not None or self._web
        return f"{'agentic' if agentic else 'multi_turn'}:inference_error"

    def _left_memory(self, sample: Sample, steps: Sequence[Step]) -> Scored:
        memory = steps[-1].outcome.get("memory") if steps else None
        assert self.chain is not None  # a prerequisites' task has its chain
        self.chain.end(sample.id, memory)
        return Scored(extracted=("memory" if memory else "no_memory",),
                      scores={LEFT_MEMORY: float(memory is not None)})  # fmt: skip


def _decoded(answer: Any, count: int) -> bool:
    """Whether the decoding process answered `count` items, each its calls (strings) and its
    decoder's error: that process ran BFCL's decoders on the model's text, so its answer is
    checked before the networked process is sent it (which gates each call again)."""
    return (isinstance(answer, list) and len(answer) == count
            and all(isinstance(a, dict) and isinstance(a.get("calls"), list)
                    and all(isinstance(c, str) for c in a["calls"])
                    and isinstance(a.get("decode_error"), str | None) for a in answer))  # fmt: skip


def step_calls(step: Step) -> ToolCalls:
    """A native step's answer as the engine parsed it (its text alone when it offered no
    tools)."""
    return step.calls if step.calls is not None else ToolCalls(content=step.text)


def _assistant(step: Step) -> dict[str, Any]:
    """A native step as the assistant's message BFCL's OpenAI FC handler keeps (the server's
    message: no content beside calls), its calls under the step's ids."""
    parsed = step_calls(step)
    if not parsed.calls:
        return {"role": "assistant", "content": parsed.content}
    calls = [{"id": step.call_id(i), "type": "function",
              "function": {"name": c.name, "arguments": c.arguments}}
             for i, c in enumerate(parsed.calls)]  # fmt: skip
    return {"role": "assistant", "content": parsed.content or None, "tool_calls": calls}
