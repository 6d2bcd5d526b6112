"""τ²-bench in a report: one row per run that ran τ² tasks, each domain's average reward and
pass^k with its interval (from each run's tau2_results.json) and the overall, best overall
first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.catalog.taskrefs import TAU2_DOMAINS
from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.reports.tables import Table, with_interval
from evalpipe.rundir.kindresults import read_kind_results
from evalpipe.rundir.layout import RunDir

KIND = "tau2"


def tau2_tables(run_dirs: Sequence[Path], warnings: list[str]) -> list[Table]:
    """The τ² table (none when no run ran τ²); a document that cannot be read, or does not
    hold what τ²'s does, becomes a warning."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for run_dir in run_dirs:
        files = RunDir(run_dir)
        try:
            document = read_kind_results(files, KIND)
        except (RunDirError, DamagedFileError) as exc:
            warnings.append(str(exc))
            continue
        if document is None:
            continue
        if not isinstance(document.get("domains"), dict) or "overall" not in document:
            warnings.append(f"{files.kind_results(KIND)} holds no τ² domains; left out.")
            continue
        found.append((run_dir.name, document))
    if not found:
        return []
    found.sort(key=lambda pair: -(pair[1]["overall"].get("avg_reward") or 0.0))
    domains = [d for d in TAU2_DOMAINS if any(d in doc["domains"] for _, doc in found)]
    rows = tuple(
        (name, *(_cell(doc["domains"].get(d)) for d in domains),
         _percent(doc["overall"].get("avg_reward")))
        for name, doc in found
    )  # fmt: skip
    return [
        Table(
            title="τ²-bench",
            header=("run", *(f"{d} reward % (pass^k)" for d in domains), "overall %"),
            rows=rows,
            right=(False, *([True] * (len(domains) + 1))),
            notes=(
                "Average reward per episode as τ²'s evaluator gives it; pass^k over each task's "
                "trials as τ² computes it, k up to the fewest trials, with its 95 % interval "
                "over tasks [low, high] (Wilson for 0/1 values, else bootstrap; "
                "docs/agents.md).",
                "τ²'s published scores use gpt-4.1 as the user simulator: others' are not "
                "comparable to them.",
            ),
        )
    ]


def _cell(domain: Mapping[str, Any] | None) -> str:
    if domain is None:
        return ""
    bounds = domain.get("pass_hat_k_ci", {})  # absent from runs before intervals were kept
    passes = " ".join(
        with_interval(float(v), bounds[k]["ci_low"], bounds[k]["ci_high"])
        if k in bounds
        else f"{float(v) * 100:.1f}"
        for k, v in domain.get("pass_hat_k", {}).items()
    )
    return f"{_percent(domain.get('avg_reward'))} ({passes})"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.1f}"
