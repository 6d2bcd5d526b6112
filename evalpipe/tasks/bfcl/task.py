"""One BFCL single-turn category as an evalpipe task, prompting mode: BFCL's generic OSS
handler's chat (its system prompt listing the functions) rendered with the model's chat
template, as `QuickTestingOSSHandler._format_prompt` renders it, sampled as its
`_query_prompting` asks (temperature 0.001, up to 4,096 new tokens within the context), and
each completion decoded and checked by BFCL's own code in the sandbox."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Scored, check_limit
from evalpipe.tasks.bfcl.checking import SANDBOX_FAILED, check_in_sandbox

MODE = "prompting"
HANDLER = "QuickTestingOSSHandler"
# ast_checker reads one setting of the model it is told (MODEL_CONFIG_MAPPING[...]
# .underscore_to_dot); the generic handler is registered under no name, so a registered
# prompting model of the same setting (False, as every local prompting handler) stands in.
CHECKER_MODEL = "Qwen/Qwen3-8B"
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
    sampling: SamplingSettings = SAMPLING
    category: str = "bfcl"
    runs_code = True  # BFCL's decoder evals the model's text: the sandbox must be checked

    @property
    def name(self) -> str:
        return PREFIX + self.bfcl_category

    def definition(self) -> dict[str, Any]:
        return {"kind": "bfcl", "bfcl_eval": self.version, "category": self.bfcl_category,
                "mode": MODE, "handler": HANDLER, "checker_model": CHECKER_MODEL,
                "entries": len(self.entries)}  # fmt: skip

    def samples(self, limit: int | None = None) -> list[Sample]:
        check_limit(limit)
        return [
            Sample(id=e["id"], prompt=e["messages"],
                   target={"function": e["function"], "ground_truth": e["ground_truth"]})
            for e in self.entries[:limit]
        ]  # fmt: skip

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        return self.score_many([(sample, texts)])[0]

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        checks = [{"category": self.bfcl_category, "id": s.id, **s.target, "texts": list(texts)}
                  for s, texts in items]  # fmt: skip
        return [scored(found) for found in check_in_sandbox(CHECKER_MODEL, checks)]


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
