"""Display tables: frames → rows of formatted strings, and those rows → markdown.

The same Table objects feed the markdown output and the HTML page, so both always agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from evalpipe.core.span import fmt_seconds
from evalpipe.records.device import REMOTE_DEVICE
from evalpipe.reports.compare import Comparison

DASH = "—"  # not measured / not applicable
SCORE_NOTE = (
    "Scores in %: mean [95 % CI] (n samples); the CI is Wilson's score interval for 0/1 "
    "scores and a percentile bootstrap of the mean otherwise; a task's score is its first "
    "metric, a category's the mean over all its samples."
)


@dataclass(frozen=True, kw_only=True)
class Table:
    """A titled table of display strings; `right[i]` right-aligns column i (numbers)."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    right: tuple[bool, ...]
    notes: tuple[str, ...] = ()


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def score_cell(mean: float, low: float, high: float, n: int, n_total: float) -> str:
    """'75.0 [69.8, 79.6] (300)', with '(120/300)' when the group is not finished; the
    interval is left out for summaries written before intervals existed."""
    total = "" if _missing(n_total) or n >= n_total else f"/{int(n_total)}"
    if n == 0 or _missing(mean):
        return f"{DASH} (0{total})" if total else DASH
    bounds = "" if _missing(low) else f" [{low * 100:.1f}, {high * 100:.1f}]"
    return f"{mean * 100:.1f}{bounds} ({n}{total})"


def duration(seconds: float) -> str:
    if _missing(seconds):
        return DASH
    return fmt_seconds(seconds)


def number(value: float, digits: int = 1) -> str:
    """Fixed decimals with thousands separators; DASH when not measured."""
    if _missing(value):
        return DASH
    return f"{value:,.{digits}f}"


def significant_figures(value: float, figures: int = 3) -> str:
    """`figures` significant digits, but whole numbers with separators from 10^figures up."""
    if _missing(value):
        return DASH
    if abs(value) >= 10**figures:
        return f"{value:,.0f}"
    return f"{value:.{figures}g}"


_COSTS = (
    ("wall", lambda r: duration(r["wall_s"])),
    ("GPU-h", lambda r: number(r["gpu_hours"], 2)),
    ("tok/s", lambda r: number(r["tokens_per_s"], 1)),
    ("tok/s/GPU", lambda r: number(r["tokens_per_s_per_gpu"], 1)),
    ("peak GiB/GPU", lambda r: number(r["peak_memory_gib"], 1)),
    ("util %", lambda r: number(r["mean_util_pct"], 0)),
    ("J/token", lambda r: significant_figures(r["j_per_token"])),
)


QUANTIZED_MARK = "†"
QUANTIZED_NOTE = (
    f"{QUANTIZED_MARK} weights quantized by the OOM fallback (method in brackets): scores are not "
    "those of the full-precision model."
)


WEAK_SANDBOX_MARK = "‡"
WEAK_SANDBOX_NOTE = (
    f"{WEAK_SANDBOX_MARK} code scored with the sandbox's weak fallback (--sandbox weak): no "
    "namespaces, so model-written code had the network and the runner's processes within reach "
    "(docs/sandbox.md)."
)


def _run_name(row: pd.Series) -> str:
    shards = f" [{row['shards']} shards]" if row["shards"] else ""
    quantized = row.get("ladder_quantization")
    mark = "" if _missing(quantized) else f" {QUANTIZED_MARK}[{quantized}]"
    weak = f" {WEAK_SANDBOX_MARK}[sandbox weak]" if row.get("sandbox") == "weak" else ""
    return f"{row['run_id']}{shards}{mark}{weak}"


def _marks(table: pd.DataFrame) -> list[str]:
    """The notes for the marks `_run_name` put on these runs."""
    notes = [QUANTIZED_NOTE] if table["ladder_quantization"].notna().any() else []
    return notes + ([WEAK_SANDBOX_NOTE] if (table["sandbox"] == "weak").any() else [])


def leaderboard(table: pd.DataFrame, scores: pd.DataFrame, by: str) -> list[Table]:
    """The complete runs' leaderboard, then (separately) the incomplete runs."""
    groups = sorted(scores["group"].unique())
    text = {
        (run, group): score_cell(mean, low, high, int(n), n_total)
        for run, group, mean, low, high, n, n_total in scores[
            ["run", "group", "mean", "ci_low", "ci_high", "n", "n_total"]
        ].itertuples(index=False)
    }
    metrics = (
        scores.dropna(subset=["metric"])
        .groupby("group")["metric"]
        .agg(lambda m: "/".join(sorted(set("/".join(m).split("/")))))
    )
    notes = [SCORE_NOTE, f"Metric per {by}: " + "; ".join(f"{g} = {m}" for g, m in metrics.items())]
    if (table["devices"] == "cpu").any():
        notes.append(
            "Devices 'cpu': no GPU; memory and utilisation are the host's (the monitor's CPU "
            "fallback) and there is no energy reading."
        )
    if (table["devices"] == REMOTE_DEVICE).any():
        notes.append(
            f"Devices '{REMOTE_DEVICE}': the model ran on a server (--backend openai) with no GPU "
            "visible here; memory, utilisation and energy are the server's and not measured."
        )
    notes.extend(_marks(table))
    notes.append(
        f"{DASH}: not measured, or no rate (tok/s, J/token) for a run that generated nothing. "
        "GPU-hours = wall × GPUs, summed over a run's jobs."
    )

    def cells(row: pd.Series) -> list[str]:
        return [text.get((row["run"], group), DASH) for group in groups]

    complete = table[table["complete"]]
    incomplete = table[~table["complete"]]
    costs = [name for name, _ in _COSTS]
    tables = [
        Table(
            title="Leaderboard (complete runs)",
            header=("preset", "run", "devices", *groups, *costs),
            rows=tuple(
                (r["preset"], _run_name(r), r["devices"], *cells(r), *(f(r) for _, f in _COSTS))
                for _, r in complete.iterrows()
            ),
            right=(False, False, False, *[True] * (len(groups) + len(costs))),
            notes=tuple(notes),
        )
    ]
    if not incomplete.empty:
        tables.append(
            Table(
                title="Incomplete runs (partial results: not comparable with the complete runs)",
                header=("preset", "run", "status", "done", "devices", *groups, *costs),
                rows=tuple(
                    (
                        r["preset"],
                        _run_name(r),
                        r["status"],
                        f"{r['n_done']}/{r['n_total'] or '?'}",
                        r["devices"],
                        *cells(r),
                        *(f(r) for _, f in _COSTS),
                    )
                    for _, r in incomplete.iterrows()
                ),
                right=(False, False, False, True, False, *[True] * (len(groups) + len(costs))),
                notes=(
                    "(n/N) in a score cell: n of the N planned samples are done.",
                    *_marks(incomplete),
                ),
            )
        )
    return tables


def predictions(table: pd.DataFrame) -> list[Table]:
    """Predicted against actual wall time and GPU-hours, for runs submitted with an estimate
    (none when no run was): the estimate's error, visible run after run."""
    predicted = table[table["predicted_wall_s_mid"].notna()]
    if predicted.empty:
        return []

    def span(row: pd.Series, figure: str, fmt: Callable[[float], str]) -> str:
        low, mid, high = (row[f"predicted_{figure}_{end}"] for end in ("low", "mid", "high"))
        return f"{fmt(mid)} ({fmt(low)}–{fmt(high)})"

    def error(actual: float, mid: float) -> str:
        return DASH if _missing(actual) or not actual else f"{mid / actual - 1:+.0%}"

    def inside(actual: float, row: pd.Series, figure: str) -> str:
        if _missing(actual):
            return DASH
        low, high = row[f"predicted_{figure}_low"], row[f"predicted_{figure}_high"]
        return "yes" if low <= actual <= high else "no"

    rows = tuple(
        (
            r["preset"],
            _run_name(r),
            span(r, "wall_s", duration),
            duration(r["wall_s"]),
            error(r["wall_s"], r["predicted_wall_s_mid"]),
            inside(r["wall_s"], r, "wall_s"),
            span(r, "gpu_hours", lambda h: number(h, 2)),
            number(r["gpu_hours"], 2),
            error(r["gpu_hours"], r["predicted_gpu_hours_mid"]),
        )
        for _, r in predicted.iterrows()
    )
    return [
        Table(
            title="Predicted vs actual (runs submitted with an estimate)",
            header=(
                "preset", "run", "predicted wall (range)", "actual wall", "wall error", "in range",
                "predicted GPU-h (range)", "actual GPU-h", "GPU-h error",
            ),
            rows=rows,
            right=(False, False, True, True, True, False, True, True, True),
            notes=(
                "Predicted: submission.json's estimate, expected (low–high). Wall: the longest "
                "job's process time (queue waits excluded); error = predicted / actual − 1. "
                f"GPU-h {DASH} where the run saw no GPU (the CPU engine).",
            ),
        )
    ]  # fmt: skip


def _per_task_rows(
    table: pd.DataFrame, counts: pd.DataFrame, cells: Callable[[pd.Series], tuple[str, ...]]
) -> tuple[tuple[str, ...], ...]:
    """One row per run and task of `counts`: the run's preset, its display name, the task,
    then `cells` of the count row."""
    presets = dict(zip(table["run"], table["preset"], strict=True))
    names = {r["run"]: _run_name(r) for _, r in table.iterrows()}
    return tuple(
        (presets.get(r["run"], "?"), names.get(r["run"], r["run"]), r["task"], *cells(r))
        for _, r in counts.iterrows()
    )


def cut_offs(table: pd.DataFrame, counts: pd.DataFrame) -> list[Table]:
    """Per task of a reasoning model's run, the completions that ran out of tokens inside their
    reasoning (scored as unanswered): a low score from a short budget, told from wrong answers."""
    if counts.empty:
        return []
    rows = _per_task_rows(table, counts, lambda r: (
        f"{r['cut_off']}/{r['completions']}",
        f"{r['cut_off'] / r['completions']:.0%}" if r["completions"] else DASH,
    ))  # fmt: skip
    return [
        Table(
            title="Cut off inside the reasoning",
            header=("preset", "run", "task", "cut off / completions", "share"),
            rows=rows,
            right=(False, False, False, True, True),
            notes=(
                "Completions that ended inside the reasoning before an answer (the token "
                "budget ran out) score 0; raise the task's max_tokens, or the suite's.",
            ),
        )
    ]


def refusals(table: pd.DataFrame, counts: pd.DataFrame) -> list[Table]:
    """Per task, the samples the engine refused (none refused: no table): a score lowered by
    prompts longer than the context, told from wrong answers."""
    if counts.empty:
        return []
    rows = _per_task_rows(table, counts, lambda r: (r["reason"], f"{r['refused']}/{r['samples']}"))
    return [
        Table(
            title="Refused by the engine",
            header=("preset", "run", "task", "reason", "refused / samples"),
            rows=rows,
            right=(False, False, False, False, True),
            notes=(
                "Samples the engine did not run score 0 (context_overflow: the prompt leaves no "
                "room for an answer in the context; each sample's record says its token count "
                "and the limit). A longer --max-model-len, where the model allows it, fits them.",
            ),
        )
    ]


def occupancy(table: pd.DataFrame) -> list[Table]:
    """How much of each run's generation the batch spent less than half full (none when no run
    recorded it): the time a run lost to its tail of long completions."""
    shown = table[table["tail_share"].notna()]
    if shown.empty:
        return []
    rows = tuple(
        (
            r["preset"],
            _run_name(r),
            f"{r['tail_share']:.0%}",
            number(r["tail_tokens_per_s"], 1),
            number(r["rest_tokens_per_s"], 1),
            number(r["preemptions"], 0),
        )
        for _, r in shown.iterrows()
    )
    return [
        Table(
            title="Batch occupancy (generation)",
            header=("preset", "run", "tail share", "tail tok/s", "rest tok/s", "preemptions"),
            rows=rows,
            right=(False, False, True, True, True, True),
            notes=(
                "Tail: engine steps with fewer than half of the engine's sequence slots busy; "
                "tail share = their share of the generation wall. A large share with a low tail "
                "rate is time lost to a few long completions (see --admission, docs/runner.md). "
                "Preemptions: sequences the engine set aside with its KV cache full, to compute "
                "again later (a larger cache or a lower max_num_seqs avoids them).",
            ),
        )
    ]


def with_interval(mean: float, low: float, high: float) -> str:
    """'0.0 [0.0, 27.8]' (%), DASH when nothing is shared."""
    if _missing(mean):
        return DASH
    return f"{mean * 100:.1f} [{low * 100:.1f}, {high * 100:.1f}]"


def comparison(result: Comparison, alpha: float) -> list[Table]:
    """Per-task differences B − A on shared samples, then the cost ratios B / A."""
    rows = []
    for _, r in result.tasks.iterrows():
        interval = (
            DASH
            if r["n_shared"] == 0
            else f"{r['diff'] * 100:+.1f} [{r['ci_low'] * 100:+.1f}, {r['ci_high'] * 100:+.1f}]"
        )
        rows.append(
            (
                r["task"],
                r["metric"],
                str(r["n_shared"]),
                with_interval(r["mean_a"], r["ci_a_low"], r["ci_a_high"]),
                with_interval(r["mean_b"], r["ci_b_low"], r["ci_b_high"]),
                interval,
                r["test"],
                significant_figures(r["p"], 2),
                significant_figures(r["p_holm"], 2),
                "yes" if r["significant"] else "",
            )
        )
    tasks = Table(
        title=f"Compare per task: B = {result.run_b} vs A = {result.run_a}",
        header=(
            "task",
            "metric",
            "shared n",
            "A %",
            "B %",
            "B − A (95 % CI)",
            "test",
            "p",
            "p (Holm)",
            "significant",
        ),
        rows=tuple(rows),
        right=(False, False, True, True, True, True, False, True, True, False),
        notes=(
            "Only samples both runs finished (same task and sample_id) are compared. "
            "A % and B %: mean [95 % CI] as in the leaderboard. "
            "B − A CI: paired bootstrap percentile interval. Test: exact McNemar for 0/1 metrics, "
            "else the paired bootstrap. Significant: Holm-adjusted p < "
            f"{alpha:g} across the tasks.",
        ),
    )
    ratio_rows = tuple(
        (
            str(r["quantity"]),
            significant_figures(r["a"], 4),
            significant_figures(r["b"], 4),
            significant_figures(r["ratio"], 3),
        )
        for _, r in result.ratios.iterrows()
    )
    ratios = Table(
        title="Cost ratios (B / A)",
        header=("quantity", "A", "B", "B / A"),
        rows=ratio_rows,
        right=(False, True, True, True),
    )
    return [tasks, ratios]


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown(tables: Sequence[Table], warnings: Sequence[str] = ()) -> str:
    """GitHub-flavoured markdown: a heading, a pipe table and its notes per table."""
    parts = []
    for table in tables:
        lines = [f"## {table.title}", ""]
        lines.append("| " + " | ".join(_escape(h) for h in table.header) + " |")
        lines.append("|" + "|".join("---:" if r else "---" for r in table.right) + "|")
        lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in table.rows]
        if not table.rows:
            lines.append("| " + " | ".join("" for _ in table.header) + " |")
        if table.notes:
            lines.append("")
            lines += [f"- {note}" for note in table.notes]
        parts.append("\n".join(lines))
    if warnings:
        parts.append("\n".join(["## Warnings", "", *(f"- {w}" for w in warnings)]))
    return "\n\n".join(parts) + "\n"
