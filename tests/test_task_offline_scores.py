"""The offline sets measure something: a real small model beats chance, random weights do not.

Real vLLM on the CPU. Lean on purpose: 40 samples per set, the sets' own short max_tokens.
"""

from __future__ import annotations

import statistics

import pytest

from evalpipe.engine.protocol import Engine
from evalpipe.tasks import load_task

pytestmark = pytest.mark.vllm

LIMIT = 40
# What guessing scores: a uniform pick among four options; ~0 for a free-form number or program.
CHANCE = {"ordering": 0.25, "arithmetic": 0.0, "pyfuncs": 0.0}


def _evaluate(engine: Engine, name: str) -> tuple[float, float]:
    """(mean, standard error) of the task's first metric over LIMIT samples."""
    task = load_task(name)
    samples = task.samples(limit=LIMIT)
    generations = engine.generate([s.prompt for s in samples], task.sampling)
    scored = task.score_many([(s, g.texts) for s, g in zip(samples, generations, strict=True)])
    values = [r.scores[task.metrics[0]] for r in scored]
    return statistics.fmean(values), statistics.stdev(values) / len(values) ** 0.5


@pytest.mark.parametrize("name", ["pyfuncs", "arithmetic"])
def test_smollm2_scores_clearly_above_chance(smollm2: Engine, name: str) -> None:
    mean, stderr = _evaluate(smollm2, name)
    # Measured on the 2-core VM: pyfuncs 0.75 ± 0.07, arithmetic 0.35 ± 0.08 (40 samples).
    assert mean > CHANCE[name] + 3 * stderr, (mean, stderr)
    assert mean >= {"pyfuncs": 0.4, "arithmetic": 0.15}[name], (mean, stderr)


@pytest.mark.parametrize("name", ["ordering", "arithmetic", "pyfuncs"])
def test_random_weights_score_no_better_than_chance(tiny_engine: Engine, name: str) -> None:
    mean, stderr = _evaluate(tiny_engine, name)
    assert mean <= CHANCE[name] + 2 * stderr + 0.05, (mean, stderr)
