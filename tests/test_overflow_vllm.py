"""A prompt longer than the context on the real vLLM engine (slow tier): tiny_random's 1,024
tokens against a 3,000-word question between two short ones (tests/fixtures/overflow). The run
completes, the short samples are scored, the long one is recorded as a context overflow with
its token counts, and a resume neither asks nor duplicates it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.cli import main

pytestmark = pytest.mark.vllm

TASK = Path(__file__).parent / "fixtures" / "overflow" / "long_question.yaml"
RUN = ["run", "--preset", "tiny_random", "--backend", "vllm", "--tasks", str(TASK)]


def records(out: Path) -> dict[str, dict]:
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == len({r["sample_id"] for r in rows})  # never duplicated
    return {r["sample_id"]: r for r in rows}


def test_a_prompt_longer_than_the_context_fails_its_sample_not_the_run(
    tmp_path: Path, vllm_env: dict, tiny_random_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    assert "refused by the engine (scored 0): long_question 1 context_overflow" in (
        capsys.readouterr().out
    )
    found = records(out)
    for short in ("0", "2"):
        assert "refusal" not in found[short] and set(found[short]["scores"]) == {"accuracy"}
        assert 0 < found[short]["prompt_tokens"] < 1024 and sum(found[short]["completion_tokens"])
    long = found["1"]
    refusal = long["refusal"]
    assert refusal["reason"] == "context_overflow" and refusal["limit"] == 1024
    # 3,000 words are well over 3,000 tokens, counted as vLLM would get them (chat template).
    assert refusal["prompt_tokens"] > 3000 and long["prompt_tokens"] == refusal["prompt_tokens"]
    assert long["scores"] == {"accuracy": 0.0} and long["completion_tokens"] == [0]
    summary = json.loads((out / "summary.json").read_text())
    task = summary["tasks"]["long_question"]
    assert summary["complete"] and task["n"] == 3 and task["refused"] == {"context_overflow": 1}

    # Resume with the last short sample missing: only it is generated again.
    lines = (out / "samples.jsonl").read_text().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["sample_id"] != "2"]
    (out / "samples.jsonl").write_text("".join(kept))
    assert main([*RUN, "--out", str(out)]) == 0
    again = records(out)
    assert set(again) == {"0", "1", "2"} and again["1"] == long and again["0"] == found["0"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
