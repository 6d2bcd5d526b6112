"""Pairwise verdicts as Arena-Hard-Auto reads and scores them: the five-level verdict read from a
judge's output, each verdict turned into battles against the baseline (a strong verdict weighs
three), the bootstrapped score with its interval, and how often swapping the two answers'
positions changes the judge's verdict.

Each question is judged twice (arena-hard-auto's gen_judgment.py): game 1 with the baseline's
answer as assistant A and the model's as B, game 2 swapped. A pair counts only when both games
have a verdict (its show_result.py drops the question otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Game 1: the baseline is assistant A; game 2: the model is.
BASELINE_FIRST, MODEL_FIRST = 1, 2
GAMES = (BASELINE_FIRST, MODEL_FIRST)
# show_result.py's load_judgments: a strong verdict ([[A>>B]]) is three battles.
STRONG_WEIGHT = 3
# show_result.py's print_leaderboard: 100 bootstrap rounds, the 5th and 95th percentiles.
ROUNDS = 100
LOWER, UPPER = 0.05, 0.95
BOOTSTRAP_SEED = 0

# show_result.py's label_to_score: assistant A's outcome per battle for each verdict.
_A_WINS, _TIE, _B_WINS = 1.0, 0.5, 0.0
_OUTCOMES: dict[str, tuple[float, int]] = {
    "A>B": (_A_WINS, 1),
    "A>>B": (_A_WINS, STRONG_WEIGHT),
    "A=B": (_TIE, 1),
    "A<<B": (_B_WINS, STRONG_WEIGHT),
    "A<B": (_B_WINS, 1),
    "B>A": (_B_WINS, 1),
    "B>>A": (_B_WINS, STRONG_WEIGHT),
    "B=A": (_TIE, 1),
    "B<<A": (_A_WINS, STRONG_WEIGHT),
    "B<A": (_A_WINS, 1),
}
VERDICTS = tuple(_OUTCOMES)


def read_verdict(text: str, patterns: Sequence[str]) -> str | None:
    """The verdict in a judge's output as gen_judgment.py's get_score reads it: the first
    pattern with a non-empty match over the upper-cased text gives its last match; None when no
    pattern matches. The label may be one that is no verdict (e.g. "A"): see a_outcomes."""
    for pattern in patterns:
        matches = [m for m in re.findall(pattern, text.upper()) if m != ""]
        if matches:
            return matches[-1].strip("\n")
    return None


def a_outcomes(label: str | None) -> list[float] | None:
    """Assistant A's battles for a verdict; None for no verdict or a label that is none of the
    ten (arena-hard-auto's show_result.py stops with a KeyError there; evalpipe counts the
    judgment as a parse failure)."""
    if label not in _OUTCOMES:
        return None
    outcome, weight = _OUTCOMES[label]
    return [outcome] * weight


def model_outcome(label: str | None, game: int) -> float | None:
    """The model's result in one game, its verdict's strength left out: 1 won, 0.5 tie, 0 lost."""
    battles = a_outcomes(label)
    if battles is None:
        return None
    return battles[0] if game == MODEL_FIRST else 1.0 - battles[0]


def pair_battles(baseline_first: str | None, model_first: str | None) -> list[float] | None:
    """The model's battles from one question's two games, in show_result.py's order (game 2's,
    then game 1's from the other side); None when either game has no verdict."""
    first, second = a_outcomes(baseline_first), a_outcomes(model_first)
    if first is None or second is None:
        return None
    return second + [1.0 - s for s in first]


@dataclass(frozen=True, kw_only=True)
class Consistency:
    """Position consistency over the pairs with both verdicts, as the MT-Bench paper (Zheng et
    al., 2023, §3.3, Table 2) measures it: a pair is consistent when the model's result (won,
    tie, lost; the verdict's strength left out) is the same in both orders. An inconsistent pair
    favours the first position when assistant A never lost in either game, else the second."""

    pairs: int
    inconsistent: int
    favours_first: int
    favours_second: int

    @property
    def rate(self) -> float | None:
        return self.inconsistent / self.pairs if self.pairs else None

    def to_dict(self) -> dict[str, float | int | None]:
        return {
            "pairs": self.pairs,
            "inconsistent": self.inconsistent,
            "rate": self.rate,
            "favours_first": self.favours_first,
            "favours_second": self.favours_second,
        }


def consistency(pairs: Sequence[tuple[str | None, str | None]]) -> Consistency:
    """Position consistency of (game 1 verdict, game 2 verdict) pairs."""
    judged = inconsistent = first = 0
    for baseline_first, model_first in pairs:
        a1, a2 = a_outcomes(baseline_first), a_outcomes(model_first)
        if a1 is None or a2 is None:
            continue
        judged += 1
        if 1.0 - a1[0] != a2[0]:
            inconsistent += 1
            first += int(a1[0] >= _TIE and a2[0] >= _TIE)
    return Consistency(
        pairs=judged,
        inconsistent=inconsistent,
        favours_first=first,
        favours_second=inconsistent - first,
    )


@dataclass(frozen=True, kw_only=True)
class ArenaScore:
    """A model's score against the baseline, 0-1: `score` and its interval as show_result.py
    prints them (the mean and the 5th/95th percentiles of the bootstrap rounds' win rates),
    and `win_rate`, the mean of all battles (no resampling)."""

    battles: int
    win_rate: float
    score: float
    lower: float
    upper: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "battles": self.battles,
            "win_rate": self.win_rate,
            "score": self.score,
            "lower": self.lower,
            "upper": self.upper,
        }


def arena_scores(
    battles: Mapping[str, Sequence[float]],
    *,
    rounds: int = ROUNDS,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, ArenaScore]:
    """Each model's score against its baseline from its battles, computed as show_result.py's
    print_leaderboard does: per round, each model's battles resampled with replacement
    (pandas groupby.sample) and averaged; the score is the rounds' mean, the interval their
    5th and 95th percentiles. arena-hard-auto draws from numpy's global generator unseeded;
    here a RandomState(seed) draws, so with np.random.seed(seed) before its code runs on the
    same battles in the same order, the numbers are equal. With every model judged against the
    same baseline, the win rate against it is also the Bradley-Terry probability of beating
    it (the maximum-likelihood fit of a model against one opponent is its mean outcome)."""
    import numpy as np
    import pandas as pd

    rows = [(model, score) for model in battles for score in battles[model]]
    if not rows:
        return {}
    frame = pd.DataFrame(rows, columns=["model", "scores"]).astype({"scores": object})
    state = np.random.RandomState(seed)
    boots = pd.concat(
        [
            frame.groupby("model").sample(frac=1.0, replace=True, random_state=state)
            .groupby("model").mean()
            for _ in range(rounds)
        ]
    )  # fmt: skip
    boots["scores"] = boots["scores"].astype(float)
    grouped = boots.groupby("model")["scores"]
    mean, lower, upper = grouped.mean(), grouped.quantile(LOWER), grouped.quantile(UPPER)
    return {
        model: ArenaScore(
            battles=len(values),
            win_rate=sum(values) / len(values),
            score=float(mean[model]),
            lower=float(lower[model]),
            upper=float(upper[model]),
        )
        for model, values in battles.items()
        if values
    }


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """The answers the model's are judged against, by question uid, and whose they are."""

    name: str
    answers: Mapping[str, str]
