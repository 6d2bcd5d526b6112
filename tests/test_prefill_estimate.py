"""The estimate's prefill term at long context: attention's FLOPs, which grow with the prompt's
square, beside the weights' matmuls, which grow with its length (docs/planner.md, "Long
contexts")."""

from __future__ import annotations

import pytest
from test_estimate import _work

from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.preset import load_preset
from evalpipe.estimate.cost import generate_s
from evalpipe.estimate.throughput import Attention, attention_flop_s, roofline
from evalpipe.planning import planner

H100 = get_gpu("h100-80gb")


def test_attention_flops_grow_with_the_square_and_stop_at_a_sliding_window() -> None:
    qwen3 = load_preset("qwen3_32b")
    attention = Attention.of(qwen3.architecture)
    weights = 2 * qwen3.architecture.params_b * 1e9  # FLOPs a prompt token, per the roofline
    # 2 × 64 layers × 64 heads × 128 dims × L² against 2 × 32.76e9 × L: equal near L = 62,500.
    for length, share in ((32768, 0.524), (131072, 2.098)):
        assert attention.flops(length) / (weights * length) == pytest.approx(share, abs=1e-3)
    assert attention.flops(2 * 32768) == pytest.approx(4 * attention.flops(32768))
    windowed = Attention(pair_flops=0.0, window_pair_flops=1.0, window=128)
    assert windowed.flops(100) == 100 * 100 / 2  # within the window: every earlier token
    assert windowed.flops(10_000) == 128 * 10_000 - 128 * 128 / 2  # beyond: 128 at most each


def test_the_roofline_prefill_of_a_128k_prompt_is_three_times_its_linear_part() -> None:
    qwen3 = load_preset("qwen3_32b")
    plan = planner.plan(qwen3, H100, max_model_len=131072, read_model_config=False)
    rates = roofline(qwen3, H100, plan)
    per_token = 2 * qwen3.architecture.params_b * 1e9 / (2 * 989e12)  # TP=2 at 989 TFLOPS
    assert rates.attention_flop_s == pytest.approx(per_token / (2 * 32.76e9))
    linear = 131072 * rates.prefill_s
    assert rates.prompt_s(131072) == pytest.approx(linear * 3.098, rel=1e-3)
    assert rates.prompt_s(1024) == pytest.approx(1024 * rates.prefill_s * 1.016, rel=1e-3)
    # A RULER-like task: 10 prompts of 128k, one token out; prefill is nearly all of it.
    ruler = generate_s(rates, [_work(samples=10, prompt=131072, gen=1, completions=0)], 1, "mid")
    assert ruler == pytest.approx(10 * rates.prompt_s(131072), rel=0.01)


def test_a_smoke_calibration_runs_attention_at_the_measured_matmul_rate() -> None:
    smol = load_preset("smollm2_135m")
    assert attention_flop_s(smol, 1 / 4000) == pytest.approx(1 / 4000 / (2 * 0.135e9))
