"""bfcl_results.json's content: per category BFCL's accuracy with its interval, BFCL's groups and
overall as its leaderboard computes them (overall.py), and whether that overall is complete: a
category not run counts 0 there, so the document names every one it counted so. `BfclSummary`
is the document's reader (the report's BFCL table)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DamagedFileError
from evalpipe.core.intervals import interval_fields
from evalpipe.tasks.bfcl import overall
from evalpipe.tasks.bfcl.child import run_program
from evalpipe.tasks.bfcl.sensitivity import spread
from evalpipe.tasks.bfcl.websearch import REFUSED_CALLS
from evalpipe.tasks.kindbase import FinishedScores

COUNTS_PROGRAM = Path(__file__).with_name("counts_program.py")
BENCHMARK = "BFCL v4"
SENSITIVITY = "format_sensitivity"


def results_document(
    categories: Sequence[str], scores: FinishedScores, header: Mapping[str, Any], prefix: str
) -> dict[str, Any]:
    """The document for the run's BFCL `categories` (task names `prefix` + category) from their
    finished samples' `scores`; `header` says how they were run (mode, handler)."""
    figures: dict[str, overall.Figure] = {}
    rows: dict[str, dict[str, Any]] = {}
    values: dict[str, list[float]] = {}
    for name in categories:
        finished = scores.get(prefix + name, ())
        if not finished:
            continue  # BFCL scores no category without entries: counted as not run
        values[name] = [s.get("accuracy", 0.0) for _, s in finished]
        correct = math.fsum(values[name])
        figures[name] = overall.category(correct, len(finished))
        rows[name] = {"accuracy": figures[name].accuracy, "correct": correct,
                      "total": len(finished),
                      "unparsed": math.fsum(s.get("unparsed", 0.0) for _, s in finished),
                      **interval_fields(values[name])}  # fmt: skip
        refused = [s[REFUSED_CALLS] for _, s in finished if REFUSED_CALLS in s]
        if refused:  # web search: calls the gate did not execute
            rows[name][REFUSED_CALLS] = math.fsum(refused)
    absent = [c for c in overall.SCORED if c not in figures]
    if absent:
        entries = package_entries()
        figures |= {c: overall.not_run(c, entries[c]) for c in absent}
    found = overall.groups(figures)
    groups = {g: {"accuracy": f.accuracy, "count": f.count, "not_run": list(f.missing)}
              for g, f in found.items() if g != "overall"}  # fmt: skip
    for group, weight in overall.WEIGHTS.items():
        groups[group]["weight"] = weight
    if not found["live"].missing:  # a mean over the live entries: an interval of its own
        groups["live"] |= interval_fields([v for c in overall.LIVE_AST for v in values[c]])
    missing = found["overall"].missing
    document = {"benchmark": BENCHMARK, **header, "categories": rows, "groups": groups,
                "overall": found["overall"].accuracy, "overall_complete": not missing,
                "not_run": absent, "overall_note": _note(missing)}  # fmt: skip
    formats = scores.get(prefix + SENSITIVITY, ())
    if formats:  # outside the overall: its spread across prompt formats
        document[SENSITIVITY] = spread([(i, s.get("accuracy", 0.0)) for i, s in formats])
    return document


@cache
def package_entries() -> Mapping[str, int]:
    """The package's entries of each category its overall counts, as it counts one not run
    (read once per process: ~1 s)."""
    return run_program(COUNTS_PROGRAM, overall.SCORED, "entry counts")


def _note(missing: Sequence[str]) -> str:
    if not missing:
        return "every category BFCL's overall counts was run"
    return (
        f"incomplete: BFCL's overall counts {len(missing)} categories not run as 0 "
        f"({', '.join(missing)}); the overall is computed as BFCL computes it, with them"
    )


@dataclass(frozen=True, kw_only=True)
class BfclSummary:
    """What a report shows of one run's bfcl_results.json."""

    mode: str
    groups: Mapping[str, float]  # group → accuracy, as BFCL computes it
    partial: frozenset[str]  # the groups that count a category not run as 0
    overall: float
    not_run: tuple[str, ...]  # the categories the overall counts as 0

    @property
    def complete(self) -> bool:
        return not self.not_run

    @classmethod
    def from_dict(cls, document: Mapping[str, Any], path: Path) -> BfclSummary:
        """The summary of `document` (read from `path`); DamagedFileError for a document of
        another shape (written before evalpipe computed BFCL's overall, or damaged)."""
        try:
            found = document["groups"]
            return cls(
                mode=str(document["mode"]),
                groups={g: float(v["accuracy"]) for g, v in found.items()},
                partial=frozenset(g for g, v in found.items() if v["not_run"]),
                overall=float(document["overall"]),
                not_run=tuple(c for g in overall.WEIGHTS for c in found[g]["not_run"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DamagedFileError(
                f"{path} holds no BFCL groups and overall ({type(exc).__name__}: {exc}); a run "
                "made before evalpipe computed them: rerun it, or leave it out of the report."
            ) from exc
