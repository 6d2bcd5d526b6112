"""SmolLM2's answers judged by SmolLM2 end to end through `evalpipe run`: a multi-turn sample
generated turn by turn, then the judge in its own process. A judge this small mostly fails to
give a readable rating; the test measures that (the counts add up), it does not hide it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

TASK = Path(__file__).parent / "fixtures" / "judged" / "capitals.yaml"


def test_smollm2_judges_smollm2_through_evalpipe_run(
    tmp_path: Path, vllm_env: dict[str, str]
) -> None:
    from evalpipe.catalog import weights

    weights.prepare("smollm2_135m")
    out = tmp_path / "run"
    argv = [
        sys.executable, "-m", "evalpipe", "run", "--preset", "smollm2_135m",
        "--tasks", f"judge:{TASK}", "--judge", "smollm2_135m", "--judge-max-tokens", "48",
        "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(argv, env={**os.environ, **vllm_env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "judging the answers in a new process" in done.stderr

    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    by_id = {s["sample_id"]: s for s in samples}
    assert (
        len(by_id["fr"]["turns"]) == 2 and by_id["fr"]["turns"][1] == by_id["fr"]["completions"][0]
    )
    turns = [json.loads(x) for x in (out / "turns.jsonl").read_text().splitlines()]
    assert [(t["sample_id"], t["turn"]) for t in turns] == [("fr", 0)]

    (folder,) = (out / "judgments").iterdir()
    judged = [json.loads(x) for x in (folder / "judgments.jsonl").read_text().splitlines()]
    assert sorted(j["sample_id"] for j in judged) == ["fr@2", "jp@1"]
    for j in judged:
        assert j["completions"][0].strip()  # the judge's whole output is kept
        assert by_id[j["sample_id"].split("@")[0]]["completions"][0] in j["prompt"][1]["content"]
    summary = json.loads((folder / "summary.json").read_text())
    print("judge summary:", json.dumps({k: summary[k] for k in ("judgments", "parse_failures")}))
    readable = sum(1 for j in judged if j["scores"])
    assert summary["parse_failures"] == len(judged) - readable
    assert summary["judge"]["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert summary["judge"]["backend"] == "vllm" and summary["comparable"] is False
    assert f"{len(judged)} judgment(s), {summary['parse_failures']} without" in done.stdout
