"""A BFCL run on the real vLLM engine (slow tier): tiny_random answers three entries each of
simple_python and irrelevance in prompting mode; the run completes, every completion gets BFCL's
verdict from the sandboxed checker, and per-category accuracy is kept (what the random model
answers is not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.cli import main

pytestmark = pytest.mark.vllm


def test_a_tiny_random_run_records_bfcls_verdicts_and_per_category_accuracy(
    tmp_path: Path, vllm_env: dict, tiny_random_path: Path
) -> None:
    out = tmp_path / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "vllm", "--limit", "3",
            "--tasks", "bfcl:simple_python,irrelevance", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted(r["sample_id"] for r in rows) == sorted(
        [f"simple_python_{i}" for i in range(3)] + [f"irrelevance_{i}" for i in range(3)]
    )
    for row in rows:
        assert set(row["scores"]) == {"accuracy", "unparsed", "sandbox_failed"}
        assert row["scores"]["sandbox_failed"] == 0.0 and len(row["extracted"]) == 1
    document = json.loads((out / "bfcl_results.json").read_text())
    for category in ("simple_python", "irrelevance"):
        found = document["categories"][category]
        assert found["total"] == 3 and 0.0 <= found["accuracy"] <= 1.0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
