"""`evalpipe report` over runs that ran BFCL: one row per run from its bfcl_results.json, best
overall first, groups as BFCL computes them, the mode, and whether the overall counts
categories the run did not run; a document of an older shape is a warning, not a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import SyntheticRun, write_run

from evalpipe.cli import main
from evalpipe.tasks.bfcl import overall
from evalpipe.tasks.bfcl.results import results_document


def bfcl_run(folder: Path, run_id: str, right: dict[str, list[float]]) -> Path:
    """A run of `right` (category → per-entry accuracy) with its bfcl_results.json."""
    tasks = {f"bfcl_{c}": ("bfcl", values) for c, values in right.items()}
    run = write_run(folder, SyntheticRun(run_id=run_id, preset="p", tasks=tasks))
    scores = {f"bfcl_{c}": [(f"{c}_{i}", {"accuracy": v}) for i, v in enumerate(values)]
              for c, values in right.items()}  # fmt: skip
    document = results_document(list(right), scores, {"mode": "prompting"}, "bfcl_")
    (run / "bfcl_results.json").write_text(json.dumps(document))
    return run


def test_the_bfcl_table_ranks_runs_and_says_what_each_overall_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bfcl_run(tmp_path / "all", "all", {c: [1.0, 0.0] for c in overall.SCORED})
    bfcl_run(tmp_path / "single", "single", {c: [1.0] for c in overall.SCORED[:13]})
    old = write_run(tmp_path / "old", SyntheticRun(run_id="old", preset="p",
                                                   tasks={"gsm": ("math", [1.0])}))  # fmt: skip
    (old / "bfcl_results.json").write_text(json.dumps({"mode": "prompting", "overall": None}))
    assert main(["report", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    table = out.split("## BFCL")[1]
    rows = [line for line in table.splitlines() if line.startswith("| all") or
            line.startswith("| single")]  # fmt: skip
    # single: non-live, live and irrelevance all 1.0, the rest 0: 30 % of the overall.
    assert rows[0].startswith("| all | prompting | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 |")
    assert rows[0].endswith("| yes |")
    assert rows[1].startswith("| single | prompting | 30.0§ | 100.0 | 100.0 | 100.0 | 0.0§ |")
    assert "| 0.0§ | 100.0 | no: 9 not run (multi_turn_base, " in rows[1]
    assert "bfcl_results.json holds no BFCL groups and overall" in err
    assert "| old |" not in table
