"""AIME's avg@n, pass@k and maj@k as evalpipe scores them, against a hand-written reference on
the same completions: seeded sets of 16 `\\boxed{}` answers per problem (zero-padded or not, some
without an answer, many tied votes) scored by the `aime2024` task, and the reference's values
computed from the answers' integers by the definitions.

Reference: pass@k as the share of all k-subsets of the n completions holding a right one
(counted by enumeration, not by the closed form); maj@k as lighteval's `MajAtK`, the value
`max(answers[:k], key=answers[:k].count)` (the first of the tied answers wins; "no answer" is a
vote, never right).

    python bench/aime_metrics.py [--problems N] [--seed S]
    python bench/aime_metrics.py --quick
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time

from benchlib import parse_args

from evalpipe.tasks import load_task
from evalpipe.tasks.base import Sample
from evalpipe.tasks.math_metrics import sampled_scores

N = 16
KS = (2, 4, 8, 16)


def reference(answers: list[int | None], gold: int, k_values: tuple[int, ...]) -> dict[str, float]:
    right = [a == gold for a in answers]
    out = {f"avg@{len(answers)}": sum(right) / len(answers)}
    for k in k_values:
        subsets = list(itertools.combinations(right, k))
        out[f"pass@{k}"] = sum(any(s) for s in subsets) / len(subsets)
    for k in k_values:
        first = answers[:k]
        out[f"maj@{k}"] = float(max(first, key=first.count) == gold)
    return out


def completion(answer: int | None, rng: random.Random) -> str:
    if answer is None:
        return "I could not finish this one."
    written = f"{answer:03d}" if rng.random() < 0.5 else str(answer)
    return f"Adding the cases gives {rng.randint(0, 999)} first, then \\boxed{{{written}}}."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, {"problems": 8})
    rng = random.Random(args.seed)
    task = load_task("aime2024")  # n 16, k [16]: the shipped protocol
    scorer = task.config.scorer
    agree = disagree = ties = 0
    start = time.perf_counter()
    for index in range(args.problems):
        gold = rng.randint(0, 999)
        pool = [gold, rng.randint(0, 999), rng.randint(0, 999), None]
        answers = [rng.choice(pool) for _ in range(N)]
        sample = Sample(id=str(index), prompt="", target={"answer": f"{gold:03d}"})
        [scored] = task.score_many([(sample, [completion(a, rng) for a in answers])])
        wanted = reference(answers, gold, tuple(k for k in scorer.k if k > 1))
        counts = sorted((answers.count(a) for a in set(answers)), reverse=True)
        ties += len(counts) > 1 and counts[0] == counts[1]
        for metric, value in wanted.items():
            if abs(scored.scores[metric] - value) < 1e-12:
                agree += 1
            else:
                disagree += 1
                print(f"DISAGREE problem {index} {metric}: evalpipe {scored.scores[metric]}, "
                      f"reference {value}; answers {answers}, gold {gold}")  # fmt: skip
    # The same rules at k = 2, 4, 8, 16 on the answers alone (the task file asks for 16 only).
    for _ in range(args.problems):
        gold = rng.randint(0, 3)
        answers = [rng.choice([0, 1, 2, 3, None]) for _ in range(N)]
        got = sampled_scores([a == gold for a in answers], answers, KS)
        for metric, value in reference(answers, gold, KS).items():
            agree += abs(got[metric] - value) < 1e-12
            disagree += abs(got[metric] - value) >= 1e-12
    seconds = time.perf_counter() - start
    print(f"problems: {2 * args.problems} (x {N} completions); 16-vote ties: {ties}")
    print(f"metric values: agree {agree}, disagree {disagree}; {seconds:.1f} s")
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
