"""summary.json as text: the results table printed at the end of `evalpipe run` and `merge`."""

from __future__ import annotations

from evalpipe.core.textable import format_table
from evalpipe.rundir.occupancy import OccupancySummary
from evalpipe.rundir.summary import MetricSummary, Summary


def format_summary(summary: Summary) -> str:
    """The results table printed at the end of `evalpipe run` and `evalpipe merge`."""
    rows: list[tuple[object, ...]] = []
    for name, task in summary.tasks.items():
        for metric, s in task.metrics.items():
            # A subset's breakdown counts its own samples; its planned total is not known.
            n = s.n if "/" in metric else f"{task.n}/{task.n_total}"
            rows.append((task.category, name, metric, n, _fmt(s), _ci(s)))
        if not task.metrics:
            rows.append((task.category, name, "-", f"0/{task.n_total}", "-", ""))
    for name, cat in summary.categories.items():
        for metric, s in cat.micro.items():
            rows.append((name, "(micro)", metric, s.n, _fmt(s), _ci(s)))
        for metric, m in cat.macro.items():
            tasks = f"{m.n_tasks} task" + ("s" if m.n_tasks != 1 else "")
            rows.append((name, "(macro)", metric, tasks, f"{m.mean:.3f}", ""))
    table = format_table(("category", "task", "metric", "n", "mean", "95% CI"), rows)
    t = summary.throughput
    rate = f"{t.tokens_per_s:.1f} tok/s" if t.tokens_per_s else "n/a"
    work = (
        f"{t.generated_tokens} tokens generated in {t.generate_s:.1f} s ({rate})"
        if t.generated_tokens
        else f"nothing generated, options scored in {t.generate_s:.1f} s"
    )
    status = "complete" if summary.complete else "INCOMPLETE"
    return (
        f"{table}\n\n{summary.n_done}/{summary.n_total} samples ({status}); "
        f"{work}; load {t.load_s:.1f} s, wall {t.wall_s:.1f} s"
        + _occupancy_line(summary.occupancy)
        + _refused_line(summary)
    )


def _refused_line(summary: Summary) -> str:
    """'refused (scored 0): mytask 1 context_overflow'; empty when nothing was refused."""
    parts = [
        f"{name} {count} {reason}"
        for name, task in summary.tasks.items()
        for reason, count in task.refused.items()
    ]
    return f"\nrefused by the engine (scored 0): {', '.join(parts)}" if parts else ""


def _occupancy_line(occupancy: OccupancySummary | None) -> str:
    """'tail: 23% of generation with < half of 64 slots busy, 310 tok/s against 1,020; 12
    preemptions'."""
    if occupancy is None or occupancy.tail_share is None:
        return ""
    rates = (occupancy.tail_tokens_per_s, occupancy.rest_tokens_per_s)
    speed = (
        f", {rates[0]:,.0f} tok/s against {rates[1]:,.0f}"
        if rates[0] is not None and rates[1] is not None
        else ""
    )
    preempted = occupancy.preemptions
    preempted_text = "" if preempted is None else f"; {preempted:,} preemptions (KV cache full)"
    return (
        f"\ntail: {occupancy.tail_share:.0%} of generation with < half of "
        f"{occupancy.slots} sequence slots busy{speed}{preempted_text}"
    )


def _fmt(stats: MetricSummary) -> str:
    return f"{stats.mean:.3f}"


def _ci(stats: MetricSummary) -> str:
    """'[0.000, 0.278]'; summaries written before intervals existed show their stderr."""
    if stats.ci_low is None or stats.ci_high is None:
        return f"±{stats.stderr:.3f}"
    return f"[{stats.ci_low:.3f}, {stats.ci_high:.3f}]"
