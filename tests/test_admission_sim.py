"""bench/admission_sim.py's decode model follows vLLM's scheduler on a full KV cache: a waiting
sequence enters only with room for its prompt, and a growing batch preempts its latest
sequence, which later computes its prompt and generated tokens again."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from admission_sim import CPU_BLOCK, simulate


def one_second(batch: int, context: float) -> float:
    return 1.0


def test_without_a_cache_limit_the_batch_runs_to_its_longest_sequence() -> None:
    walled = simulate([(0, 4), (0, 2)], slots=2, step_s=one_second)
    assert (walled.seconds, walled.preemptions) == (4.0, 0)


def test_a_batch_that_outgrows_the_cache_preempts_its_latest_sequence_and_recomputes_it() -> None:
    # Two sequences of 4 tokens, a cache of 5: their third tokens would make 6. The second
    # entered is preempted with 2 tokens made; the first finishes after step 3; the second
    # re-enters, computes its 2 tokens again (prefill) and makes the last 2 in steps 4 and 5.
    walled = simulate([(0, 4), (0, 4)], slots=2, step_s=one_second, prefill_s=0.5, kv_tokens=5)
    assert walled.preemptions == 1
    assert walled.seconds == pytest.approx(6 + 2 * 0.5)


def test_the_cache_fills_by_whole_blocks() -> None:
    # Blocks of 3, a cache of 2: each sequence's first 3 tokens take one block; their fourth
    # tokens need a block each, so the second is preempted with 3 tokens made and re-enters
    # after the first finishes (step 4), its 4 tokens in 2 blocks.
    walled = simulate(
        [(0, 4), (0, 4)], slots=2, step_s=one_second, prefill_s=0.5, kv_tokens=6, block=3
    )
    assert walled.preemptions == 1
    assert walled.seconds == pytest.approx(5 + 3 * 0.5)


def test_a_prompt_waits_for_room_in_the_cache_and_nothing_is_preempted() -> None:
    walled = simulate([(4, 1), (4, 1)], slots=2, step_s=one_second, kv_tokens=5)
    assert (walled.seconds, walled.preemptions) == (2.0, 0)


def test_the_step_time_sees_the_batch_and_its_mean_context() -> None:
    seen: list[tuple[int, float]] = []

    def step_s(batch: int, context: float) -> float:
        seen.append((batch, context))
        return 1.0

    simulate([(10, 2), (20, 2)], slots=2, step_s=step_s, kv_tokens=math.inf)
    assert seen == [(2, 16.0), (2, 17.0)]  # the prompts and the tokens made so far, mean


@pytest.mark.parametrize(
    ("slots", "gib", "preempted"),
    [(64, 1, False), (256, 1, True), (256, 4, False)],
)
def test_the_runners_cache_check_flags_the_bench_runs_that_preempted(
    slots: int, gib: int, preempted: bool
) -> None:
    """On SmolLM2, bench/admission.py's workload in longest-first order from the predicted
    lengths was preempted 35 times at 256 slots with a 1 GiB cache, and never at 64 slots with
    1 GiB or at 256 with 4 GiB (BENCHMARKS.md §14): the check each longest-first run records
    says as much, from the same predictions."""
    from admission import past_lengths, workload

    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import Room
    from evalpipe.estimate.lengths import PastLengths
    from evalpipe.planning.memory import kv_bytes_per_token
    from evalpipe.run.admission import admission_order, length_model
    from evalpipe.run.stream import Item

    tasks, lengths = workload(1024, 512)
    recorded = past_lengths(lengths, 512)
    past = PastLengths(
        run="past",
        preset="tiny_random",
        backend="vllm",
        tasks={t.name: {s.id: recorded[s.prompt] for s in t.samples()} for t in tasks},
        prompts={t.name: {s.id: 40 for s in t.samples()} for t in tasks},  # chat-templated
    )
    items = [Item(task=t, sample=s) for t in tasks for s in t.samples()]
    per_token = kv_bytes_per_token(load_preset("smollm2_135m").architecture, 2)  # bf16
    kv_tokens = (gib << 30) // per_token // CPU_BLOCK * CPU_BLOCK  # whole blocks
    _, record = admission_order(
        items,
        length_model([past], "smollm2_135m", "vllm"),
        "longest-first",
        deterministic=False,
        room=Room(slots=slots, kv_tokens=kv_tokens, block=CPU_BLOCK),
    )
    assert record["cache"]["fits"] is not preempted
