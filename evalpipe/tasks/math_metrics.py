"""Metrics over a sample's n completions: avg@n, pass@k (unbiased) and maj@k.

- `avg@n`: the fraction of the n completions that are right (the mean accuracy; with n = 1 it
  keeps its old name, `accuracy`). Its mean over samples estimates pass@1.
- `pass@k`: 1 - C(n-c, k) / C(n, k), the unbiased estimator of Chen et al. (2021, eq. 1) of the
  chance that at least one of k completions is right, from c right ones among n.
- `maj@k`: right when the most frequent answer among the first k completions is right. As
  lighteval's `MajAtK` (metrics_sample.py: `max(all_answers, key=all_answers.count)` over
  `predictions[: k]`), a tie goes to the answer that occurs first, and a completion without an
  answer votes for "no answer", which is never right. Answers are grouped by math-verify's
  parse (so "025" and "25" are one answer).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_correct(correct: Sequence[bool], votes: Sequence[Hashable], k: int) -> bool:
    """Whether the majority answer of the first k completions is right (ties: first seen)."""
    if not 1 <= k <= len(votes):
        raise ValueError(f"maj@k needs 1 <= k <= n, got k={k}, n={len(votes)}")
    first = list(votes[:k])
    winner = max(range(k), key=lambda i: (first.count(first[i]), -i))
    return votes[winner] is not None and bool(correct[winner])


def vote_key(parsed: Sequence[Any]) -> str | None:
    """What a completion votes for: math-verify's parse of its answer; None without one."""
    return str(parsed[0]) if parsed else None


def sampled_scores(
    correct: Sequence[bool], votes: Sequence[Hashable], ks: Sequence[int]
) -> dict[str, float]:
    """`accuracy` for one completion; for n > 1, avg@n and pass@k, maj@k for each k in 2..n."""
    n = len(correct)
    mean = sum(correct) / n if n else 0.0
    if n <= 1:
        return {"accuracy": mean}
    scores = {f"avg@{n}": mean}
    chosen = [k for k in ks if 1 < k <= n]
    scores |= {f"pass@{k}": pass_at_k(n, sum(correct), k) for k in chosen}
    scores |= {f"maj@{k}": float(majority_correct(correct, votes, k)) for k in chosen}
    return scores


def sampled_metrics(n: int, ks: Sequence[int]) -> tuple[str, ...]:
    """The names `sampled_scores` gives for n completions, in its order."""
    if n <= 1:
        return ("accuracy",)
    chosen = [k for k in ks if 1 < k <= n]
    return (f"avg@{n}", *(f"pass@{k}" for k in chosen), *(f"maj@{k}" for k in chosen))
