"""IFEval scoring: each completion checked against a prompt's verifiable instructions.

The checkers are Google's IFEval instruction classes as packaged by `if-verifiable` (PyPI,
Apache-2.0; the same classes lm-eval ships in its ifeval task). What is evalpipe's is
the protocol around them, which follows lm-eval's `ifeval` task (`utils.py`) exactly, as
bench/ifeval_agreement.py checks on the same completions:

- each instruction is built from its `kwargs` with empty values dropped (`if v`), then rebuilt
  with the prompt when it asks for it (`prompt_to_repeat`);
- strict: the completion as written; an empty (all-whitespace) completion follows nothing;
- loose: the completion or any of seven variants (first line, last line or both removed,
  `*` removed) follows the instruction;
- per completion, prompt level: every instruction followed; instruction level: each one.

Metrics per sample (means over its n completions): `prompt_level_strict_acc`,
`prompt_level_loose_acc`, and the instruction-level `inst_level_strict_acc` and
`inst_level_loose_acc` as the fraction of the sample's instructions followed, weighted by
their number in the summary (`WEIGHT`), so a task's instruction-level accuracy is, as in the
reference, followed instructions over all instructions rather than a mean of fractions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from evalpipe.core.errors import DatasetError, MissingDependencyError
from evalpipe.tasks.base import Scored
from evalpipe.tasks.punkt_data import INSTALL, use_punkt

Target = dict[str, Any]
METRICS = (
    "prompt_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_strict_acc",
    "inst_level_loose_acc",
)
# rundir.summary's weight key for an instruction-level metric: the sample's instruction count.
WEIGHT = "{metric}:weight"
# langdetect draws random n-grams: a fixed seed makes `language:response_language` the same
# on every run (the reference leaves it unseeded, so it can flip on ambiguous text).
LANGDETECT_SEED = 0


def ifeval_target(record: dict[str, Any]) -> Target:
    """The reference for one IFEval row: its prompt, instruction ids and their kwargs."""
    ids, kwargs = record["instruction_id_list"], record["kwargs"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise DatasetError(f"instruction_id_list must be a non-empty list of ids, got {ids!r}")
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        raise DatasetError(
            f"kwargs must be a list with one object per instruction ({len(ids)}), got {kwargs!r}"
        )
    if not all(isinstance(k, dict) for k in kwargs):
        raise DatasetError(f"each kwargs entry must be an object, got {kwargs!r}")
    return {"prompt": str(record["prompt"]), "instruction_id_list": ids, "kwargs": kwargs}


def check_instruction_ids(ids: Sequence[str], registry: dict[str, Any]) -> None:
    unknown = sorted(set(ids) - set(registry))
    if unknown:
        raise DatasetError(
            f"unknown IFEval instruction id(s) {', '.join(unknown)}; known ids: "
            f"{', '.join(sorted(registry))}"
        )


class InstructionScorer:
    """Strict and loose instruction following, prompt and instruction level. The checkers load
    on first use, so listing or planning tasks needs neither them nor the Punkt model."""

    def follows(self, target: Target, text: str) -> tuple[list[bool], list[bool]]:
        """(strict, loose): per instruction, whether `text` follows it."""
        registry, transformations = _checkers()
        ids = target["instruction_id_list"]
        check_instruction_ids(ids, registry)
        variants = [v for v in transformations(text) if v.strip()]
        strict, loose = [], []
        for instruction_id, kwargs in zip(ids, target["kwargs"], strict=True):
            checker = registry[instruction_id](instruction_id)
            checker.build_description(**{k: v for k, v in kwargs.items() if v})
            args = checker.get_instruction_args()
            if args and "prompt" in args:
                checker.build_description(prompt=target["prompt"])
            strict.append(bool(text.strip()) and bool(checker.check_following(text)))
            loose.append(any(checker.check_following(v) for v in variants))
        return strict, loose

    def score_many(self, items: Sequence[tuple[Target, Sequence[str]]]) -> list[Scored]:
        out = []
        for target, texts in items:
            results = [self.follows(target, t) for t in texts]
            count = len(target["instruction_id_list"])
            per = {
                "prompt_level_strict_acc": [float(all(s)) for s, _ in results],
                "prompt_level_loose_acc": [float(all(lo)) for _, lo in results],
                "inst_level_strict_acc": [sum(s) / count for s, _ in results],
                "inst_level_loose_acc": [sum(lo) / count for _, lo in results],
            }
            scores = {m: sum(v) / len(v) for m, v in per.items()}
            for metric in METRICS[2:]:
                scores[WEIGHT.format(metric=metric)] = float(count)
            extracted = tuple(f"strict {_bits(s)} loose {_bits(lo)}" for s, lo in results)
            out.append(Scored(extracted=extracted, scores=scores))
        return out


@functools.cache
def _checkers() -> tuple[dict[str, Any], Callable[[str], list[str]]]:
    """if-verifiable's instruction registry and its loose variants of a response, with NLTK
    reading evalpipe's Punkt model and langdetect seeded."""
    try:
        import langdetect
        from if_verifiable.common import get_loose_transformations
        from if_verifiable.ifeval.instructions_registry import INSTRUCTION_DICT
    except ImportError as exc:
        raise MissingDependencyError(
            f"IFEval's checkers need {exc.name!r}, which is not installed. Install with: {INSTALL}"
        ) from None
    use_punkt()
    langdetect.DetectorFactory.seed = LANGDETECT_SEED
    return INSTRUCTION_DICT, get_loose_transformations


def _bits(flags: Sequence[bool]) -> str:
    """Which instructions a completion followed, in instruction order: "101"."""
    return "".join("1" if f else "0" for f in flags)
