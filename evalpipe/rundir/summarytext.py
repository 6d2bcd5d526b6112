"""summary.json as text: the results table printed at the end of `evalpipe run` and `merge`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalpipe.core.textable import format_table


def format_summary(summary: Mapping[str, Any]) -> str:
    """The results table printed at the end of `evalpipe run` and `evalpipe merge`."""
    rows: list[tuple[object, ...]] = []
    for name, task in summary["tasks"].items():
        for metric, s in task["metrics"].items():
            # A subset's breakdown counts its own samples; its planned total is not known.
            n = s["n"] if "/" in metric else f"{task['n']}/{task['n_total']}"
            rows.append((task["category"], name, metric, n, _fmt(s), _ci(s)))
        if not task["metrics"]:
            rows.append((task["category"], name, "-", f"0/{task['n_total']}", "-", ""))
    for name, cat in summary["categories"].items():
        for metric, s in cat["micro"].items():
            rows.append((name, "(micro)", metric, s["n"], _fmt(s), _ci(s)))
        for metric, s in cat["macro"].items():
            tasks = f"{s['n_tasks']} task" + ("s" if s["n_tasks"] != 1 else "")
            rows.append((name, "(macro)", metric, tasks, _fmt(s), ""))
    table = format_table(("category", "task", "metric", "n", "mean", "95% CI"), rows)
    t = summary["throughput"]
    rate = f"{t['tokens_per_s']:.1f} tok/s" if t["tokens_per_s"] else "n/a"
    work = (
        f"{t['generated_tokens']} tokens generated in {t['generate_s']:.1f} s ({rate})"
        if t["generated_tokens"]
        else f"nothing generated, options scored in {t['generate_s']:.1f} s"
    )
    status = "complete" if summary["complete"] else "INCOMPLETE"
    return (
        f"{table}\n\n{summary['n_done']}/{summary['n_total']} samples ({status}); "
        f"{work}; load {t['load_s']:.1f} s, wall {t['wall_s']:.1f} s"
        + _occupancy_line(summary.get("occupancy"))
    )


def _occupancy_line(occupancy: Mapping[str, Any] | None) -> str:
    """'tail: 23% of generation with < half of 64 slots busy, 310 tok/s against 1,020; 12
    preemptions'."""
    if not occupancy:
        return ""
    rates = [occupancy.get("tail_tokens_per_s"), occupancy.get("rest_tokens_per_s")]
    speed = f", {rates[0]:,.0f} tok/s against {rates[1]:,.0f}" if None not in rates else ""
    preempted = occupancy.get("preemptions")
    preempted_text = "" if preempted is None else f"; {preempted:,} preemptions (KV cache full)"
    return (
        f"\ntail: {occupancy['tail_share']:.0%} of generation with < half of "
        f"{occupancy['slots']} sequence slots busy{speed}{preempted_text}"
    )


def _fmt(stats: Mapping[str, Any]) -> str:
    return f"{stats['mean']:.3f}"


def _ci(stats: Mapping[str, Any]) -> str:
    """'[0.000, 0.278]'; summaries written before intervals existed show their stderr."""
    if "ci_low" not in stats:
        return f"±{stats['stderr']:.3f}"
    return f"[{stats['ci_low']:.3f}, {stats['ci_high']:.3f}]"
