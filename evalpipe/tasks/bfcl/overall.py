"""BFCL v4's groups and overall score from per-category figures, computed as bfcl-eval's
`eval_runner_helper.generate_leaderboard_csv` computes them (pure; the same arithmetic in the
same order, so the figures equal its own: tests/test_bfcl_overall.py runs its code beside).

A category not run counts 0 there, with the package's number of entries as its count (the live
group weighs its categories by count); each figure names the categories it counted so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# bfcl-eval's constants/category_mapping.py: every category its overall counts, and the one it
# scores outside it.
NON_LIVE_SIMPLE = ("simple_python", "simple_java", "simple_javascript")
NON_LIVE_OTHER = ("multiple", "parallel", "parallel_multiple")
LIVE_AST = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
IRRELEVANCE = ("irrelevance", "live_irrelevance")
RELEVANCE = "live_relevance"
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
              "multi_turn_long_context")  # fmt: skip
WEB_SEARCH = ("web_search_base", "web_search_no_snippet")
MEMORY = ("memory_kv", "memory_vector", "memory_rec_sum")
SCORED = (*NON_LIVE_SIMPLE, *NON_LIVE_OTHER, *IRRELEVANCE, *LIVE_AST, RELEVANCE, *MULTI_TURN,
          *MEMORY, *WEB_SEARCH)  # fmt: skip
# The overall's groups and their weights (generate_leaderboard_csv's [10, 10, 10, 30, 40]).
WEIGHTS = {"non_live": 10, "live": 10, "irrelevance_detection": 10, "multi_turn": 30, "agentic": 40}


@dataclass(frozen=True, kw_only=True)
class Figure:
    """An accuracy with BFCL's count beside it (entries scored, or the package's entries for a
    category not run) and the categories it counts as 0 because they were not run."""

    accuracy: float
    count: int
    missing: tuple[str, ...] = ()


def category(correct: float, total: int) -> Figure:
    """A category's figure as `save_eval_results` computes it: correct entries over entries."""
    return Figure(accuracy=correct / total, count=total)


def not_run(name: str, entries: int) -> Figure:
    """A category not run, as `get_category_score` counts it: 0 over the package's entries."""
    return Figure(accuracy=0, count=entries, missing=(name,))


def weighted(figures: Sequence[Figure]) -> Figure:
    """`calculate_weighted_accuracy`: the mean weighted by counts (a mean over entries)."""
    count, total = 0, 0.0
    for figure in figures:
        count += figure.count
        total += figure.accuracy * figure.count
    return Figure(accuracy=total / count, count=count, missing=_missing(figures))


def unweighted(figures: Sequence[Figure]) -> Figure:
    """`calculate_unweighted_accuracy`: the plain mean of the figures."""
    total = 0.0
    for figure in figures:
        total += figure.accuracy
    count = sum(figure.count for figure in figures)
    return Figure(accuracy=total / len(figures), count=count, missing=_missing(figures))


def percentage_weighted(figures: Sequence[Figure], weights: Sequence[float]) -> Figure:
    """`calculate_percentage_weighted_accuracy`: the mean with weights normalised to sum 1."""
    weight_sum = sum(weights)
    total = 0.0
    for figure, weight in zip(figures, [w / weight_sum for w in weights], strict=True):
        total += figure.accuracy * weight
    count = sum(figure.count for figure in figures)
    return Figure(accuracy=total, count=count, missing=_missing(figures))


def groups(figures: Mapping[str, Figure]) -> dict[str, Figure]:
    """BFCL's groups and `overall` from a figure for every category of SCORED (not_run ones
    included), in the leaderboard's order."""

    def pick(names: Sequence[str]) -> list[Figure]:
        return [figures[name] for name in names]

    simple = unweighted(pick(NON_LIVE_SIMPLE))
    web_search, memory = unweighted(pick(WEB_SEARCH)), unweighted(pick(MEMORY))
    out = {
        "non_live_simple": simple,
        "non_live": unweighted([simple, *pick(NON_LIVE_OTHER)]),
        "live": weighted(pick(LIVE_AST)),
        "irrelevance_detection": unweighted(pick(IRRELEVANCE)),
        "relevance_detection": figures[RELEVANCE],
        "multi_turn": unweighted(pick(MULTI_TURN)),
        "web_search": web_search,
        "memory": memory,
        "agentic": unweighted([web_search, memory]),
    }
    out["overall"] = percentage_weighted([out[g] for g in WEIGHTS], list(WEIGHTS.values()))
    return out


def _missing(figures: Sequence[Figure]) -> tuple[str, ...]:
    return tuple(name for figure in figures for name in figure.missing)
