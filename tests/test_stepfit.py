"""The engine's decode steps by batch size (the manifest's `occupancy.steps`) and the step cost
fitted to them, which prices a run on a device with neither roofline nor smoke record from a
pilot's own steps (estimate/stepfit.py). Synthetic steps; one fake-engine run for the record."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from runner_support import fake_engine, preset, toy_tasks

from evalpipe.catalog.gpus import get_gpu
from evalpipe.core.span import Span
from evalpipe.estimate.cost import basis, estimate
from evalpipe.estimate.history import PastJob, TaskRecord
from evalpipe.estimate.stepfit import MIN_SPREAD, fit_steps
from evalpipe.estimate.workmodel import TaskWork
from evalpipe.planning import planner
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.occupancy import Occupancy
from evalpipe.rundir.stepprofile import StepProfile, bin_of

FIXED, PER_SEQ = 0.05, 0.004  # the synthetic engine: a step of b sequences takes FIXED + b·PER_SEQ


def _profile(batches: range | list[int], noise: float = 0.0) -> StepProfile:
    profile = StepProfile()
    for i, b in enumerate(batches):
        for j in range(4):  # each batch's steps a little over and under the line
            wobble = noise * (1 if (i + j) % 2 else -1)
            profile.add(FIXED + b * PER_SEQ + wobble, b)
    return profile


def test_bins_are_exact_for_small_batches_and_few_for_large_ones() -> None:
    assert [bin_of(b) for b in (1, 7, 16)] == [1, 7, 16]
    assert bin_of(17) == 16 and bin_of(18) == 17 and bin_of(1000) <= 1000 < bin_of(1000) * 1.1
    profile = StepProfile()
    for b in range(1, 1025):
        profile.add(0.1, b)
    assert len(profile.bins) <= 16 + 6 * 8  # 16 exact, then 8 a doubling up to 1,024
    assert profile.steps == 1024


def test_the_record_round_trips_through_the_manifest_and_leaves_out_prefill_steps() -> None:
    occupancy = Occupancy()
    occupancy.add(0.5, 20, 256, admitted=True)  # prefilled 20 prompts: not a decode step
    occupancy.add(0.13, 20, 256)
    occupancy.add(0.058, 2, 256)
    assert occupancy.steps.steps == 2
    back = Occupancy.from_dict(json.loads(json.dumps(occupancy.to_dict())))
    assert back.steps.to_dict() == {"2": [1, 2, 0.058], "19": [1, 20, 0.13]}
    assert Occupancy.from_dict({"steps": {"4": "damaged", "8": [2, 16, 0.3]}}).steps.steps == 2


def test_the_fit_recovers_the_fixed_and_per_sequence_cost_of_a_step() -> None:
    fit = fit_steps(_profile(range(2, 41), noise=0.002))
    assert fit is not None and fit.fitted
    assert fit.fixed_s == pytest.approx(FIXED, rel=0.05)
    assert fit.seq_s == pytest.approx(PER_SEQ, rel=0.05)
    assert (fit.low_batch, fit.high_batch) == (2, pytest.approx(40, rel=0.1))
    assert "step = 50.0 ms + 4.00 ms × batch (per sequence ±" in fit.describe()
    # The estimate's ends: the slope's 90 % interval, each line through the steps' mean point.
    (f_low, s_low), (f_high, s_high) = fit.line("low"), fit.line("high")
    assert s_low < fit.seq_s < s_high and s_high - fit.seq_s == pytest.approx(1.6449 * fit.seq_se)
    for fixed, per_seq in ((f_low, s_low), (f_high, s_high)):
        assert fixed + per_seq * fit.mean_batch == pytest.approx(fit.mean_step_s)
    assert fit_steps(StepProfile()) is None


def test_batches_too_alike_are_not_fitted_and_say_so() -> None:
    fit = fit_steps(_profile(range(18, 23)))
    assert fit is not None and not fit.fitted
    assert fit.high_batch < MIN_SPREAD * fit.low_batch
    assert "too narrow a range" in fit.describe() and "seconds per token" in fit.describe()
    assert fit.line("mid") == fit.line("high") == (0.0, fit.mean_step_s / fit.mean_batch)
    assert fit.line("low") == (fit.mean_step_s, 0.0)


def _job(steps: StepProfile, generate_s: float) -> PastJob:
    # The pilot: 10 samples × 2 completions × 100 tokens, 20 sequences decoding together.
    record = TaskRecord(task="t", samples=10, completions=20, prompt_tokens=500,
                        generated_tokens=2000, longest=100, ranked=0)  # fmt: skip
    return PastJob(path=Path("pilot"), preset="tiny_random", family="tiny", gpu="cpu", tp=1,
                   pp=1, replicas=1, backend="vllm", attempts=1, load_s=4.0,
                   generate_s=generate_s, score_s=0.0, wall_s=20.0, gpus=0, energy_j=None,
                   tasks=(record,), steps=steps)  # fmt: skip


def _work(samples: int) -> TaskWork:
    return TaskWork(task="t", category="", samples=samples, completions=2,
                    prompt_tokens=Span.exact(50), generated_tokens=Span.exact(100),
                    max_tokens=100, score_s=Span.exact(0),
                    sources=("prompts", "lengths"))  # fmt: skip


def test_a_pilots_steps_price_a_full_batch_cheaper_per_token_than_its_own() -> None:
    tiny, cpu = preset(), get_gpu("cpu")
    plan = planner.plan(tiny, cpu, gpus_per_node=1, read_model_config=False)
    own = 2000 / 20 * (FIXED + 20 * PER_SEQ)  # the pilot's 100 steps of 20 sequences
    how = basis(tiny, cpu, plan, jobs=[_job(_profile(range(1, 21), noise=0.01), own)])
    assert "own engine steps on cpu" in how.rates.basis and how.calibrated
    assert how.rate_factor.mid == pytest.approx(1.0, rel=0.03)  # the line matches its job
    pilot = estimate(tiny, plan, [_work(10)], how)
    assert "own engine steps on cpu" in pilot.basis
    assert pilot.generate_s.mid == pytest.approx(own, rel=0.03)
    # 1,000 samples: 2,000 sequences, batches of 256 (the CPU build's max_num_seqs).
    full = estimate(tiny, plan, [_work(1000)], how).generate_s
    at_full_batches = 200_000 / 256 * (FIXED + 256 * PER_SEQ)
    assert full.mid == pytest.approx(at_full_batches, rel=0.05)
    assert full.mid < 0.7 * own * 100  # the pilot's seconds per token would price it at 100×
    # The noisy steps' slope is known within an interval: the range extrapolates its ends.
    assert full.low < 0.85 * full.mid and full.high > 1.25 * full.mid


def test_a_pilot_whose_batches_are_too_alike_is_priced_per_token_with_a_wider_interval() -> None:
    tiny, cpu = preset(), get_gpu("cpu")
    plan = planner.plan(tiny, cpu, gpus_per_node=1, read_model_config=False)
    own = 2000 / 20 * (FIXED + 20 * PER_SEQ)
    narrow = basis(tiny, cpu, plan, jobs=[_job(_profile(range(18, 23)), own)])
    flat = basis(tiny, cpu, plan, jobs=[_job(StepProfile(), own)])  # a job before the record
    assert "seconds per generated token" in flat.rates.basis
    assert any("too narrow a range" in line for line in narrow.calibrated_on)
    full = estimate(tiny, plan, [_work(1000)], narrow).generate_s
    assert full.mid == pytest.approx(estimate(tiny, plan, [_work(1000)], flat).generate_s.mid)
    # The low end: a step of the full batch's 256 sequences costs what the pilot's 20 did.
    mean_step = FIXED + 20 * PER_SEQ
    assert full.low == pytest.approx(200_000 / 256 * mean_step * narrow.rate_factor.low)


def test_a_run_records_its_decode_steps_in_the_manifest(tmp_path: Path) -> None:
    engine = fake_engine()
    run = tmp_path / "run"
    run_evaluation(lambda _: engine, toy_tasks(), run, preset=preset(),
                   options=RunOptions(backend="fake"))  # fmt: skip
    steps = json.loads((run / "manifest.json").read_text())["occupancy"]["steps"]
    profile = StepProfile.from_dict(steps)
    assert profile.steps > 0
    assert all(1 <= b.batch <= engine.max_num_seqs for b in profile.bins.values())


def test_a_batch_that_holds_every_sequence_decodes_as_long_as_the_longest_answer() -> None:
    from evalpipe.estimate.cost import generate_s
    from evalpipe.estimate.throughput import from_steps

    tiny, cpu = preset(), get_gpu("cpu")
    plan = planner.plan(tiny, cpu, gpus_per_node=1, read_model_config=False)
    fit = fit_steps(_profile(range(1, 21)))
    assert fit is not None
    rates = from_steps(fit, tiny, cpu, plan)
    short = dataclasses.replace(_work(10), task="short", completions=1,
                                generated_tokens=Span(5, 5, 8))  # fmt: skip
    long = dataclasses.replace(_work(10), task="long", completions=1)
    # 20 sequences in one batch: 100 steps (the long answers), 50 + 1,000 tokens in them.
    expected = 100 * fit.fixed_s + 1050 * fit.seq_s
    assert generate_s(rates, [short, long], 1, "mid") == pytest.approx(expected)
