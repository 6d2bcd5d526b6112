"""A pilot's samples of one task: a seeded random draw stratified by prompt length, so that
short and long prompts (which tend to get short and long answers) are represented as in the
whole task."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Sequence

from evalpipe.tasks.base import Sample


def _prompt_size(sample: Sample) -> int:
    prompt = sample.prompt
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
    return len(text.encode()) + sum(len(t.encode()) for t in sample.turns)


def draw(samples: Sequence[Sample], size: int, *, seed: int, task: str) -> list[Sample]:
    """`size` of `samples`: sorted by prompt size, cut into `size` strata of (nearly) equal
    count, one sample drawn at random from each; returned in the task's own order. The same
    seed, task and samples give the same draw on any machine."""
    if size >= len(samples):
        return list(samples)
    # A stable seed per task: the tasks of one run draw independently of their order.
    digest = hashlib.sha256(f"{seed}:{task}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    order = sorted(range(len(samples)), key=lambda i: (_prompt_size(samples[i]), i))
    bounds = [round(k * len(samples) / size) for k in range(size + 1)]
    chosen = {order[rng.randrange(lo, hi)] for lo, hi in itertools.pairwise(bounds)}
    return [s for i, s in enumerate(samples) if i in chosen]
