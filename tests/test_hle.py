"""HLE: the answer format, judge prompt and schema against nvidia-hle's source, the figures
against its dump_metrics/calib_err and HLE's own method on judged fixtures written here, the
refusals, and a judged run end to end with the fake engine and a scripted endpoint judge."""

from __future__ import annotations

import ast
import json
import math
import random
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from endpoint_support import FaultServer
from judged_refs import hle_questions, reference

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import TaskRef
from evalpipe.cli import main
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.tasks.hle import HleKind, hle_task, read_rows
from evalpipe.tasks.hlegrading import Judgment, hle_grading, hle_metrics
from evalpipe.tasks.kindbase import LoadOptions


def source_namespace(root: Path, module: str, names: set[str]) -> dict[str, Any]:
    """The top-level definitions `names` of the reference's `module`, run from its source
    without its imports (they pull datasets, openai and an Azure client)."""
    from pydantic import BaseModel

    with warnings.catch_warnings():  # its own invalid escapes ('\%' in JUDGE_PROMPT)
        warnings.simplefilter("ignore")
        tree = ast.parse((root / module).read_text())
    nodes = [
        n for n in tree.body
        if (isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name in names)
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") in names for t in n.targets))
    ]  # fmt: skip
    space: dict[str, Any] = {"np": np, "math": math, "BaseModel": BaseModel, "Literal": Literal,
                             "print": lambda *a, **k: None}  # fmt: skip
    # dont_inherit: this file's `from __future__ import annotations` would hide the types.
    exec(compile(ast.Module(body=nodes, type_ignores=[]), module, "exec", dont_inherit=True), space)
    return space


@pytest.fixture
def hle_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    return reference("hle_eval", monkeypatch, importable=False)


def test_prompts_and_schema_are_nvidia_hles(hle_root: Path, tmp_path: Path) -> None:
    ref = source_namespace(hle_root, "run_judge_results.py", {"JUDGE_PROMPT", "ExtractedAnswer"})
    asked = {"SYSTEM_EXACT_ANSWER", "SYSTEM_MC", "format_message_nvidia"}
    predict = source_namespace(hle_root, "run_model_predictions.py", asked)
    rows = read_rows("hle", hle_questions(tmp_path / "hle.jsonl"))
    task = hle_task(rows)
    assert [s.id for s in task.samples()] == [r["id"] for r in rows if not r["image"]]
    grading = hle_grading()
    for sample, row in zip(task.samples(), (r for r in rows if not r["image"]), strict=True):
        # The model is asked as nvidia-hle's prediction script asks a text question.
        assert sample.prompt == predict["format_message_nvidia"](row)
        answer = f"Explanation: because.\nExact Answer: {row['answer']}\nConfidence: 80%"
        (ask,) = grading.asks(sample, [answer])
        filled = ref["JUDGE_PROMPT"].format(
            question=row["question"], correct_answer=row["answer"], response=answer
        )
        assert ask.prompt == [{"role": "user", "content": filled}]  # byte-equal, one message
    # The schema is the one OpenAI's client sends for response_format=ExtractedAnswer.
    from openai.lib._pydantic import to_strict_json_schema

    assert grading.json_schema == to_strict_json_schema(ref["ExtractedAnswer"])


def judged_sets() -> list[list[dict[str, Any] | None]]:
    """Sets of judge responses (None: the judgment did not parse), of sizes around the
    calibration's bin of 100: fewer, exactly 100, 100-199, and several bins; ties in
    confidence and parse failures throughout. 2,000+ judgments in all."""
    rng = random.Random(42)
    sets = []
    for size in (1, 37, 99, 100, 101, 150, 199, 200, 250, 301, 999):
        failures = rng.choice((0, 0.02, 0.1))
        judged: list[dict[str, Any] | None] = []
        for _ in range(size):
            if rng.random() < failures:
                judged.append(None)
                continue
            confidence = rng.choice((100, 95, 90, 80, 50, 20, 0, rng.randint(0, 100)))
            right = rng.random() < confidence / 130  # loosely calibrated, so bins differ
            judged.append({"correct": "yes" if right else "no", "confidence": confidence})
        sets.append(judged)
    return sets


def test_figures_equal_nvidia_hle_and_hles_own_method(hle_root: Path) -> None:
    ref = source_namespace(hle_root, "run_judge_results.py", {"calib_err", "dump_metrics"})
    sets = judged_sets()
    assert sum(map(len, sets)) >= 300
    for judged in sets:
        kept = [
            None if j is None else Judgment(correct=j["correct"] == "yes",
                                            confidence=j["confidence"],
                                            extracted_final_answer="x").text()
            for j in judged
        ]  # fmt: skip
        ours = hle_metrics(kept)
        # nvidia-hle: a failed judgment is an api_error answer: "no" at confidence 100.
        predictions = {
            str(i): {"judge_response": j | {"api_error": False} if j else
                     {"correct": "no", "confidence": 100, "api_error": True}}
            for i, j in enumerate(judged)
        }  # fmt: skip
        accuracy, half, nvidia, _ = ref["dump_metrics"](predictions, n=len(judged))
        assert (ours.accuracy, ours.half_width) == (accuracy, half)
        assert ours.nvidia_calibration_error == nvidia
        # HLE's repository: confidence / 100 over the judged answers only (a failed judgment
        # is never recorded), 100 × the rounded error; its code fails below one bin.
        read = [j for j in judged if j is not None]
        if len(read) < 100:
            assert ours.calibration_error is None
            continue
        cerr = ref["calib_err"](
            np.array([j["confidence"] for j in read]) / 100,
            np.array(["yes" in j["correct"] for j in read]), p="2", beta=100,
        )  # fmt: skip
        assert ours.calibration_error == 100 * round(cerr, 2)
        assert ours.parse_failures == judged.count(None)
    # Both leave the last bin out: 100-199 answers have no bin counted.
    assert hle_metrics([Judgment(correct=True, confidence=0, extracted_final_answer="").text()]
                       * 150).calibration_error == 0.0  # fmt: skip


@pytest.mark.parametrize(
    "text",
    ["not json", "[1]", '{"correct": "maybe", "confidence": 5, "extracted_final_answer": "a"}',
     '{"correct": "yes", "confidence": "high", "extracted_final_answer": "a"}',
     '{"correct": "yes", "confidence": true, "extracted_final_answer": "a"}',
     '{"correct": "no", "confidence": 5}'],
)  # fmt: skip
def test_a_judgment_off_the_schema_is_a_parse_failure(text: str, hle_root: Path) -> None:
    assert hle_grading().read(text, None) == (None, None)


def test_hle_all_is_refused_on_a_text_only_model_before_loading(tmp_path: Path) -> None:
    options = LoadOptions(preset=load_preset("tiny_random"), judge_data=tmp_path / "absent.jsonl")
    with pytest.raises(ConfigError, match=r"hle:all .* text-only model .* Run `hle`"):
        HleKind().load([(TaskRef(kind="hle", name="all"), None)], options)


def test_without_access_one_message_says_how_to_log_in_or_give_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hle_root: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty"))
    with pytest.raises(DatasetError) as caught:
        read_rows("hle", None)
    message = str(caught.value)
    assert "gated" in message and "hf auth login" in message
    assert "--judge-data /path/hle.parquet" in message


def test_a_judged_hle_run_end_to_end_with_structured_outputs(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], hle_root: Path
) -> None:
    data = hle_questions(tmp_path / "hle.jsonl", count=9)
    out = tmp_path / "run"
    # The scripted judge says yes to question 0, answers question 1 in free text (a parse
    # failure) and says no at 60 % to the others.
    verdict = {"extracted_final_answer": "3", "reasoning": "r", "correct": "no",
               "confidence": 60, "strict": True}  # fmt: skip
    script = {f"question {i} about?": json.dumps(verdict) for i in range(2, 9)}
    script["question 0 about?"] = json.dumps(verdict | {"correct": "yes", "confidence": 90})
    script["question 1 about?"] = "I think it is right."
    with FaultServer(model="judge-a", script=script) as server:
        status = main([
            "run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "hle",
            "--judge-data", str(data), "--out", str(out),
            "--judge-base-url", server.base_url, "--judge-model", "judge-a",
        ])  # fmt: skip
        judged = [b for b in server.bodies if "[correct_answer]" in json.dumps(b)]
    assert status == 0
    # Every judgment asked for HLE's schema, strict, as HLE's judge does.
    assert judged and all(
        b["response_format"]["json_schema"]["schema"] == hle_grading().json_schema
        and b["response_format"]["json_schema"]["strict"] for b in judged
    )  # fmt: skip
    answers = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(answers) == 6  # the text-only questions
    (folder,) = (out / "judgments").iterdir()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["parse_failures"] == 1
    figures = summary["benchmarks"]["hle"]
    assert (figures["n"], figures["parse_failures"], figures["accuracy"]) == (6, 1, 16.67)
    assert figures["calibration_error"] is None  # fewer than 100 answers
    assert "hle: accuracy 16.67% +/- 29.82% (n=6, 1 unparsed)" in capfd.readouterr().out
    # The report shows them in its table of judged benchmarks.
    assert main(["report", str(out)]) == 0
    report = capfd.readouterr().out
    assert "Judged benchmarks" in report
    (row,) = [line for line in report.splitlines() if "accuracy 16.67% +/- 29.82%" in line]
    assert "judge-a (openai)" in row and "| hle " in row
    assert "o3-mini-2025-01-31" in summary["note"]  # another judge: not comparable
