"""One BFCL single-turn category as an evalpipe task, in the preset's mode (modes.py): the prompt
BFCL's handler for the mode builds (the generic OSS handler's chat, rendered with the model's
chat template as `QuickTestingOSSHandler._format_prompt` renders it; or the registered model's
handler's own formatted text, sent as it is), or the question with the functions as chat tools
(native), sampled as `_query_prompting` asks (temperature 0.001, up to 4,096 new tokens within
the context), and each completion decoded and checked by BFCL's own code in the sandbox."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.records.completion import Completion
from evalpipe.records.prompt import Prompt, Rendered
from evalpipe.records.sampling import SamplingSettings
from evalpipe.records.tools import ToolCalls
from evalpipe.tasks.base import Sample, Scored, check_limit
from evalpipe.tasks.bfcl.checking import SANDBOX_FAILED, check_in_sandbox
from evalpipe.tasks.bfcl.modes import PROMPTING, Mode

SAMPLING = SamplingSettings(max_tokens=4096, temperature=0.001)
PREFIX = "bfcl_"
# BFCL's error types for a completion its decoder could not read as calls.
UNPARSED = ("ast_decoder:decoder_failed", "ast_decoder:decoder_wrong_output_format",
            "relevance_error:decoder_failed")  # fmt: skip


@dataclass(kw_only=True)
class BfclTask:
    """A BFCL category (`bfcl_simple_python`, …) over its entries as bfcl-eval loads them."""

    bfcl_category: str
    version: str
    entries: Sequence[Mapping[str, Any]] = field(repr=False)
    mode: Mode = PROMPTING
    sampling: SamplingSettings = SAMPLING
    category: str = "bfcl"
    runs_code = True  # BFCL's decoder evals the model's text: the sandbox must be checked

    @property
    def name(self) -> str:
        return PREFIX + self.bfcl_category

    @property
    def gives_tools(self) -> bool:
        return self.mode.name == "native"

    def definition(self) -> dict[str, Any]:
        return {"kind": "bfcl", "bfcl_eval": self.version, "category": self.bfcl_category,
                **self.mode.to_dict(), "entries": len(self.entries)}  # fmt: skip

    def samples(self, limit: int | None = None) -> list[Sample]:
        check_limit(limit)
        return [
            Sample(id=e["id"], prompt=self._prompt(e["prompt"]), tools=tuple(e["tools"]),
                   target={"function": e["function"], "ground_truth": e["ground_truth"]})
            for e in self.entries[:limit]
        ]  # fmt: skip

    def _prompt(self, prompt: Prompt) -> Prompt:
        # The handler mode's text is the handler's own formatted prompt: no chat template.
        return Rendered(prompt) if self.mode.name == "handler" else prompt

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        return self.score_many([(sample, texts)])[0]

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        """Texts alone: in native mode they carry no parsed calls, so each is an answer
        without calls (the runner scores native completions by `score_responses`)."""
        if self.mode.name == "native":
            return self._checked([(s, [_fc_result(ToolCalls(content=t)) for t in texts])
                                  for s, texts in items])  # fmt: skip
        return self._checked(items)

    def score_responses(self, items: Sequence[tuple[Sample, Completion]]) -> list[Scored]:
        """The engine's completions: native mode checks their parsed calls, the other modes
        their texts."""
        texts = []
        for sample, completion in items:
            generation = completion.generation
            found = generation.texts if generation is not None else ("",)
            if self.mode.name == "native":
                calls = generation.tool_calls if generation is not None else ()
                found = tuple(_fc_result(c) for c in calls) or (_fc_result(ToolCalls()),)
            texts.append((sample, found))
        return self._checked(texts)

    def _checked(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        checks = [{"category": self.bfcl_category, "id": s.id, **s.target, "texts": list(texts)}
                  for s, texts in items]  # fmt: skip
        return [scored(found) for found in check_in_sandbox(self.mode, checks)]


def fc_response(calls: ToolCalls) -> list[dict[str, str]] | str:
    """A native completion as BFCL's FC handlers record a response (`_parse_query_response_FC`):
    its calls as [{name: arguments JSON}], or its text when it made none (an unparsed call is
    text, as vLLM's server hands it back)."""
    if calls.calls:
        return [{c.name: c.arguments} for c in calls.calls]
    return calls.content


def _fc_result(calls: ToolCalls) -> str:
    """A native completion's FC response (fc_response) as JSON text."""
    return json.dumps(fc_response(calls), ensure_ascii=False)


def scored(verdicts: Sequence[Mapping[str, Any]]) -> Scored:
    """A sample's metrics: accuracy (BFCL's `valid`), and the share of its completions BFCL
    could not decode (`unparsed`) or whose check broke the sandboxed process."""
    count = len(verdicts)

    def share(test: Any) -> float:
        return sum(1 for v in verdicts if test(v)) / count

    return Scored(
        extracted=tuple(v["error_type"] or "valid" for v in verdicts),
        scores={"accuracy": share(lambda v: v["valid"]),
                "unparsed": share(lambda v: v["error_type"] in UNPARSED),
                SANDBOX_FAILED: share(lambda v: v["error_type"] == SANDBOX_FAILED)},
    )  # fmt: skip
