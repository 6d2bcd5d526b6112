"""HLE's judging and metrics: the judge prompt and response schema of nvidia-hle's
`run_judge_results.py`, read from its source (never imported: it pulls datasets, openai and an
Azure client), and the accuracy, Wald interval and RMS calibration error as HLE reports them.

Two figures differ between nvidia-hle and HLE's own repository (centerforaisafety/hle), whose
method the published numbers use: HLE divides the judge's confidence by 100 before comparing it
with 0/1 correctness and reports 100 × the rounded error; nvidia-hle compares the 0-100
confidence with 0/1 correctness as it is (a figure on another scale) and returns nothing below
100 answers, where HLE's own code fails. Both leave the last bin of 100 (with its remainder)
out, so 100-199 answers give 0.0. evalpipe reports HLE's figure, and nvidia-hle's beside it
where they differ. A judgment that does not parse is a wrong answer in the accuracy (its
question still counts, as in both) and is left out of HLE's calibration (HLE never records
it); nvidia-hle counts it as "no" with confidence 100.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from evalpipe.core.errors import MissingDependencyError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample
from evalpipe.tasks.gradings import JudgeAsk
from evalpipe.tasks.packaged import SOURCES, package_constant, package_file

SOURCE = SOURCES["hle_eval"]
JUDGE_RESULTS = "hle_eval/run_judge_results.py"
PREDICTIONS = "hle_eval/run_model_predictions.py"
SCHEMA_CLASS = "ExtractedAnswer"
# HLE's judge sampling (run_judge_results.py extract_answer): greedy, up to 4,096 tokens.
JUDGE_SAMPLING = SamplingSettings(max_tokens=4096, temperature=0.0)
BIN = 100  # calib_err's beta: the target bin size


@functools.cache
def response_schema() -> dict[str, Any]:
    """The JSON schema of nvidia-hle's ExtractedAnswer as OpenAI's structured outputs send it
    (pydantic's schema made strict), built from the class's annotations in the source."""
    path = package_file(JUDGE_RESULTS, SCHEMA_CLASS)
    with warnings.catch_warnings():  # the package's own invalid escapes are not ours to report
        warnings.simplefilter("ignore")
        tree = ast.parse(path.read_text(encoding="utf-8"))
    owner = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == SCHEMA_CLASS), None
    )
    if owner is None:
        raise MissingDependencyError(
            f"{path} defines no {SCHEMA_CLASS}; the installed nvidia-hle is not the version "
            f"evalpipe reads ({SOURCE.install()})."
        )
    properties = {
        node.target.id: {"title": node.target.id.title().replace("_", " "), **_type(node)}
        for node in owner.body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    return {
        "properties": properties,
        "required": list(properties),
        "title": SCHEMA_CLASS,
        "type": "object",
        "additionalProperties": False,
    }


def _type(node: ast.AnnAssign) -> dict[str, Any]:
    annotation = node.annotation
    if isinstance(annotation, ast.Name) and annotation.id in ("str", "int"):
        return {"type": {"str": "string", "int": "integer"}[annotation.id]}
    if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value) == "Literal":
        listed = getattr(annotation.slice, "elts", [annotation.slice])
        values = [ast.literal_eval(e) for e in listed]
        kind = "boolean" if isinstance(values[0], bool) else "string"
        return {"const": values[0], "type": kind} if len(values) == 1 else {
            "enum": values, "type": kind}  # fmt: skip
    raise MissingDependencyError(
        f"nvidia-hle's {SCHEMA_CLASS} has a field {ast.unparse(node)!r} evalpipe cannot turn "
        f"into a JSON schema; install the version it reads ({SOURCE.install()})."
    )


@dataclass(frozen=True, kw_only=True)
class Judgment:
    """A parsed HLE judgment: whether the judge said the answer is correct, and the confidence
    it extracted from the answer (0-100)."""

    correct: bool
    confidence: int
    extracted_final_answer: str

    def text(self) -> str:
        """As the judgment record keeps it (its `extracted`)."""
        return json.dumps(
            {"correct": self.correct, "confidence": self.confidence,
             "extracted_final_answer": self.extracted_final_answer}, sort_keys=True,
        )  # fmt: skip

    @classmethod
    def parse(cls, text: str) -> Judgment | None:
        """The judge's structured output read as HLE reads the parsed model (`"yes" in
        correct`); None when it is not the schema's object (a parse failure)."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        correct, confidence = data.get("correct"), data.get("confidence")
        answer = data.get("extracted_final_answer")
        if correct not in ("yes", "no") or not isinstance(answer, str):
            return None
        if not isinstance(confidence, int) or isinstance(confidence, bool):
            return None
        return cls(correct="yes" in correct, confidence=confidence, extracted_final_answer=answer)

    @classmethod
    def kept(cls, text: str) -> Judgment:
        data = json.loads(text)
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class HleGrading:
    """One judgment per answer with HLE's judge prompt as the single user message, its output
    constrained to HLE's response schema; the score is 1.0 for "yes", 0.0 for "no"."""

    judge_prompt: str
    json_schema: dict[str, Any]
    sampling: SamplingSettings | None = JUDGE_SAMPLING
    scale: ClassVar[None] = None
    kind: ClassVar[str] = "hle"

    def asks(self, sample: Sample, answers: Sequence[str]) -> list[JudgeAsk]:
        target = sample.target
        prompt = self.judge_prompt.format(
            question=target["question"], correct_answer=target["answer"], response=answers[-1]
        )
        return [JudgeAsk(turn=len(answers), prompt=[{"role": "user", "content": prompt}])]

    def read(self, text: str, game: int | None) -> tuple[str | None, float | None]:
        judgment = Judgment.parse(text)
        return (None, None) if judgment is None else (judgment.text(), float(judgment.correct))

    def definition(self) -> dict[str, Any]:
        return {"kind": self.kind, "judge_prompt": self.judge_prompt, "schema": self.json_schema}


def hle_grading() -> HleGrading:
    return HleGrading(
        judge_prompt=package_constant(JUDGE_RESULTS, "JUDGE_PROMPT"), json_schema=response_schema()
    )


def calibration_error(confidence: Sequence[float], correct: Sequence[bool]) -> float | None:
    """calib_err(p='2', beta=100) of HLE (from hendrycks/outlier-exposure): the RMS difference
    between mean confidence and accuracy over bins of 100 answers sorted by confidence (NumPy's
    argsort, so ties fall as they do there), weighted by bin size, the last bin left out; None
    below one bin."""
    import numpy as np

    if len(confidence) < BIN:
        return None
    conf, right = np.array(confidence), np.array(correct)
    order = np.argsort(conf)
    conf, right = conf[order], right[order]
    bins = [[i * BIN, (i + 1) * BIN] for i in range(len(conf) // BIN)]
    bins[-1] = [bins[-1][0], len(conf)]
    error = 0
    for start, end in bins[:-1]:
        difference = np.abs(np.nanmean(conf[start:end]) - np.nanmean(right[start:end]))
        error += (end - start) / len(conf) * np.square(difference)
    return np.sqrt(error)  # a NumPy float: the reports round it as NumPy does


@dataclass(frozen=True, kw_only=True)
class HleMetrics:
    """HLE's figures over `n` judged questions (percentages, rounded as HLE rounds them)."""

    n: int
    accuracy: float
    half_width: float  # the Wald 95 % interval's half width
    calibration_error: float | None  # HLE's method (None: fewer than 100 parsed judgments)
    nvidia_calibration_error: float | None  # nvidia-hle's calib_err figure (None: below 100)
    parse_failures: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "accuracy": self.accuracy,
            "half_width": self.half_width,
            "calibration_error": self.calibration_error,
            "nvidia_calibration_error": self.nvidia_calibration_error,
            "parse_failures": self.parse_failures,
        }


def hle_metrics(judged: Sequence[str | None]) -> HleMetrics:
    """The figures of one judgment per question (`judged`: each record's kept judgment, None
    for a parse failure or refusal)."""
    read = [Judgment.kept(t) for t in judged if t is not None]
    n = len(judged)
    accuracy = round(100 * sum(j.correct for j in read) / n, 2) if n else 0.0
    half_width = round(1.96 * math.sqrt(accuracy * (100 - accuracy) / n), 2) if n else 0.0
    hle = calibration_error([j.confidence / 100 for j in read], [j.correct for j in read])
    # nvidia-hle: a failed judgment is "no" at confidence 100; the confidence stays 0-100.
    failed = n - len(read)
    nvidia = calibration_error(
        [j.confidence for j in read] + [100] * failed, [j.correct for j in read] + [False] * failed
    )
    return HleMetrics(
        n=n,
        accuracy=accuracy,
        half_width=half_width,
        calibration_error=None if hle is None else float(100 * round(hle, 2)),
        nvidia_calibration_error=None if nvidia is None else float(round(nvidia, 2)),
        parse_failures=failed,
    )


def describe(metrics: dict[str, Any]) -> str:
    """HLE's figures in one phrase, nvidia-hle's calibration error beside HLE's where they
    differ."""
    ce, nv = metrics["calibration_error"], metrics["nvidia_calibration_error"]
    calibration = "calibration error - (fewer than 100 judged answers)" if ce is None else (
        f"calibration error {ce:.1f}")  # fmt: skip
    if nv != ce and ce is not None:
        calibration += f" (nvidia-hle's calib_err: {'-' if nv is None else nv})"
    return (
        f"accuracy {metrics['accuracy']:.2f}% +/- {metrics['half_width']:.2f}% "
        f"(n={metrics['n']}, {metrics['parse_failures']} unparsed), {calibration}"
    )
