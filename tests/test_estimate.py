"""The cost model without vLLM: roofline and smoke-calibrated rates, the work of tasks, past-run
calibration, the estimate's spans, and the choice of shards, replicas and time limit."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from evalpipe.catalog.configpath import config_dir
from evalpipe.catalog.gpus import Gpu, get_gpu, load_gpus
from evalpipe.catalog.preset import load_preset
from evalpipe.core.errors import DoesNotFitError, EstimateError
from evalpipe.core.span import Span
from evalpipe.estimate.autosize import Limit, choose, slurm_time
from evalpipe.estimate.calibration import Calibration, Planned, ProbePoint
from evalpipe.estimate.cost import ROOFLINE_SHARE, basis, estimate, generate_s
from evalpipe.estimate.history import PastJob, TaskRecord, family, load_history
from evalpipe.estimate.throughput import from_smoke, roofline
from evalpipe.estimate.workmodel import TaskWork, task_work
from evalpipe.planning import planner
from evalpipe.planning.memory import GIB
from evalpipe.rundir.samplelog import SampleRecord, write_samples
from evalpipe.rundir.timings import Timings
from evalpipe.tasks import load_task

H100 = get_gpu("h100-80gb")


def _plan(name: str, gpu: Gpu = H100, gpus: int = 8) -> tuple:
    preset = load_preset(name)
    return preset, planner.plan(preset, gpu, gpus_per_node=gpus, read_model_config=False)


def _work(task: str = "t", samples: int = 1000, prompt: float = 500, gen: float = 200,
          completions: int = 1) -> TaskWork:  # fmt: skip
    return TaskWork(
        task=task, category="c", samples=samples, completions=completions,
        prompt_tokens=Span.exact(prompt), generated_tokens=Span.exact(gen), max_tokens=512,
        score_s=Span.exact(0.0), sources=("test",),
    )  # fmt: skip


def test_roofline_single_stream_decode_reads_the_weights_once_per_token() -> None:
    preset, plan = _plan("llama3_1_8b", gpus=1)
    rates = roofline(preset, H100, plan)
    weights = plan.weights_per_gpu_gib * GIB
    # 16.06 GB of bf16 weights at 3350 GB/s: 4.79 ms a token, 209 tokens/s for one sequence.
    assert rates.step_s(1, 0) == pytest.approx(weights / 3350e9)
    assert 1 / rates.step_s(1, 0) == pytest.approx(209, abs=1)
    # 256 sequences of 1k context: the KV cache read (128 KiB/token) now outweighs the weights.
    kv = 256 * 1024 * 131072 / 3350e9
    assert rates.step_s(256, 1024) == pytest.approx(weights / 3350e9 + kv, rel=1e-3)
    # Prefill is compute bound: 2 × 8.03e9 FLOPs a token at 989 dense TFLOPS.
    assert rates.prefill_s == pytest.approx(2 * 8.03e9 / 989e12)


def test_roofline_splits_weights_and_flops_over_tensor_parallel_ranks() -> None:
    preset, plan = _plan("llama3_3_70b", gpus=4)
    rates = roofline(preset, H100, plan)
    assert plan.tensor_parallel_size == 4
    # 32.85 GiB per GPU: 10.5 ms a step, 95 tokens/s for one sequence.
    assert 1 / rates.step_s(1, 0) == pytest.approx(95, abs=1)
    assert rates.seq_s == pytest.approx(2 * 70.55e9 / (4 * 989e12), rel=0.01)


def test_devices_without_figures_need_a_calibration() -> None:
    cpu = get_gpu("cpu")
    preset, plan = _plan("smollm2_135m", gpu=cpu, gpus=1)
    with pytest.raises(EstimateError, match="evalpipe smoke --local --gpu cpu"):
        roofline(preset, cpu, plan)


def test_a_cpu_entry_is_never_offered_as_a_larger_gpu() -> None:
    big_host = Gpu(name="bighost", kind="cpu", memory_gib=2000, bandwidth_gbs=50, fp8=False)
    gpus = [*load_gpus().values(), big_host]
    preset = load_preset("llama3_3_70b")
    with pytest.raises(DoesNotFitError) as caught:
        planner.plan(
            preset, get_gpu("rtx3090-24gb"), gpus_per_node=2, max_nodes=1,
            alternatives=gpus, read_model_config=False,
        )  # fmt: skip
    message = str(caught.value)
    assert "a larger GPU: a100-80gb" in message
    assert "bighost" not in message and "a larger GPU: cpu" not in message


def test_gpu_entries_check_their_throughput_figures() -> None:
    with pytest.raises(ValueError, match="fp8_tflops needs fp8: true"):
        Gpu(name="x", memory_gib=10, bandwidth_gbs=100, fp8=False, fp8_tflops=10)
    with pytest.raises(ValueError, match="power_w must be a positive number"):
        Gpu(name="x", memory_gib=10, bandwidth_gbs=100, fp8=False, power_w=0)


def _calibration(fixed: float, per_seq: float) -> Calibration:
    probe = tuple(
        ProbePoint(batch=b, prompt_tokens=60 * b, completion_tokens=32 * b,
                   prefill_tok_s=4000.0, decode_tok_s=b / (fixed + per_seq * b))
        for b in (1, 4, 16, 64)
    )  # fmt: skip
    return Calibration(
        preset="smollm2_135m", gpu="cpu", tensor_parallel_size=1, pipeline_parallel_size=1,
        backend="vllm", host="vm", created_at="2026-01-01T00:00:00+00:00",
        phases_s={"import": 5.0, "load": 10.0, "first_token": 0.5}, kv_cache_tokens=46592,
        planned=Planned(weights_gib=0.3, kv_cache_gib=1.0, overhead_gib=0.3, kv_cache_tokens=1),
        devices=(), probe=probe,
    )  # fmt: skip


def test_smoke_probe_fits_a_step_time_line_and_the_engines_kv_capacity() -> None:
    cpu = get_gpu("cpu")
    preset, plan = _plan("smollm2_135m", gpu=cpu, gpus=1)
    rates = from_smoke(_calibration(0.02, 0.003), preset, cpu, plan)
    assert (rates.fixed_s, rates.seq_s) == (pytest.approx(0.02), pytest.approx(0.003))
    assert rates.prefill_s == pytest.approx(1 / 4000)
    assert rates.kv_tokens == 46592 and rates.max_seqs == 256  # the CPU build's default
    # 200 prompts of 100 tokens and 100 generated: KV holds 46592 / 200 = 232 sequences at
    # once, the scheduler 256, the work 200: one batch of 200.
    assert rates.batch(200, 200) == 200
    assert rates.batch(1000, 400) == pytest.approx(46592 / 400)


def test_generation_spreads_over_replicas_and_ranked_options_decode_one_token() -> None:
    preset, plan = _plan("llama3_1_8b", gpus=8)
    rates = roofline(preset, H100, plan)
    work = [_work(samples=4000)]
    one, eight = (generate_s(rates, work, n, "mid") for n in (1, 8))
    assert one > 4 * eight  # eight replicas share the samples (the tail is not shared)
    generated = generate_s(rates, [_work(gen=200)], 1, "mid")
    ranked = generate_s(rates, [_work(gen=1, completions=0)], 1, "mid")
    prefill = 1000 * 500 * rates.prefill_s
    assert ranked == pytest.approx(prefill, rel=0.05) and generated > prefill * 1.5


def test_hub_tasks_are_counted_from_the_rows_their_file_records() -> None:
    preset = load_preset("llama3_3_70b")
    gsm8k = task_work(load_task("gsm8k"), preset, limit=None, history=[], counter=None)
    assert gsm8k.samples == 1319 and not gsm8k.ranked
    # 2118 bytes at 4 bytes a token, plus the chat markup.
    assert gsm8k.prompt_tokens.mid == pytest.approx(2118 / 4 + 10)
    assert gsm8k.generated_tokens == Span.exact(384)  # max_tokens: an upper bound
    assert "max_tokens 384 as an upper bound" in gsm8k.sources[1]
    mmlu = task_work(load_task("mmlu"), preset, limit=100, history=[], counter=None)
    assert (mmlu.samples, mmlu.ranked) == (100, True)
    assert "GUESSED" in mmlu.sources[0]


def test_a_hub_task_without_recorded_rows_says_how_to_count_it(tmp_path: Path) -> None:
    copy = tmp_path / "mygsm.yaml"
    text = (Path(config_dir()) / "tasks" / "gsm8k.yaml").read_text()
    copy.write_text("\n".join(line for line in text.splitlines() if "rows:" not in line))
    with pytest.raises(EstimateError, match="records no `rows:`"):
        task_work(load_task(str(copy)), load_preset("llama3_3_70b"), limit=None,
                  history=[], counter=None)  # fmt: skip


def _past(preset: str = "llama3_1_8b", gen: int = 150, generate: float = 100.0) -> PastJob:
    task = TaskRecord(task="gsm8k", samples=1000, completions=1000, prompt_tokens=500_000,
                      generated_tokens=gen * 1000, longest=384, ranked=0)  # fmt: skip
    return PastJob(
        path=Path("results/run-1"), preset=preset, family=family("meta-llama/Llama-3.1-8B"),
        gpu="h100-80gb", tp=1, pp=1, replicas=8, backend="vllm", attempts=1, load_s=90.0,
        generate_s=generate, score_s=1.0, wall_s=200.0, gpus=8, energy_j=8 * 200 * 500.0,
        tasks=(task,),
    )  # fmt: skip


def test_past_runs_give_generated_lengths_and_calibrate_rates() -> None:
    preset, plan = _plan("llama3_1_8b")
    job = _past()
    work = task_work(load_task("gsm8k"), preset, limit=None, history=[job], counter=None)
    assert work.generated_tokens.mid == pytest.approx(150)
    assert "this preset" in work.sources[1]
    how = basis(preset, H100, plan, jobs=[job])
    assert how.calibrated and "run-1" in how.calibrated_on[0]
    assert how.load_s.mid == 90.0 and how.power_w is not None and how.power_w.mid == 500.0
    # Re-estimating the past job's own work gives back its measured generation time.
    again = task_work(load_task("gsm8k"), preset, limit=1000, history=[job], counter=None)
    again = TaskWork(**{**again.__dict__, "prompt_tokens": Span.exact(500)})
    redone = generate_s(how.rates, [again], 8, "mid") * how.rate_factor.mid
    assert redone == pytest.approx(100.0, rel=0.02)


def test_each_shard_pays_its_load_and_energy_is_board_power_by_time() -> None:
    preset, plan = _plan("llama3_3_70b")
    how = basis(preset, H100, plan)
    work = [_work(samples=20000)]
    one, four = (estimate(preset, plan, work, how, shards=n) for n in (1, 4))
    assert four.wall_s.mid < one.wall_s.mid
    assert four.gpu_hours.mid > one.gpu_hours.mid  # three more model loads
    assert one.energy_kwh is not None
    assert one.energy_kwh.mid == pytest.approx(one.gpu_hours.mid * 700 / 1000)
    assert not one.calibrated and f"{ROOFLINE_SHARE.mid:.0%}" in one.notes[0]
    record = json.loads(json.dumps(one.to_dict()))
    assert record["per_shard"]["wall_s"]["low"] <= record["wall_s"]["mid"]
    assert record["wall_s"]["high"] <= record["per_shard"]["wall_s"]["high"] + 1e-6


def _fake_cost(load: float, work: float, gpus_per_replica: int = 4):
    """cost(shards, replicas) of a job whose work divides evenly: wall = load + work / (S R)."""
    preset, plan = _plan("llama3_3_70b")
    base = estimate(preset, plan, [_work()], basis(preset, H100, plan))

    def cost(shards: int, replicas: int):
        wall = load + work / (shards * replicas)
        return dataclasses.replace(
            base, shards=shards, replicas=replicas, wall_s=Span(wall * 0.5, wall, wall * 1.5),
            gpu_hours=Span.exact(wall * shards * replicas * gpus_per_replica / 3600),
            load_s=Span.exact(load),
        )  # fmt: skip

    return cost


def test_fewest_shards_that_fit_the_limit_and_a_time_limit_from_the_prediction() -> None:
    cost = _fake_cost(load=300, work=20 * 3600)  # 20 h of work on one replica
    limit = Limit(minutes=4 * 60, source="cluster x's time_limit")
    choice = choose(cost, shards=None, replicas=2, limit=limit, auto_time=True, margin=0.8)
    # 2 replicas: 10 h per shard; high end 1.5 × (300 s + 10 h / S) ≤ 0.8 × 4 h needs S = 5.
    assert choice.shards == 5 and choice.replicas == 2
    high = 1.5 * (300 + 20 * 3600 / 10)
    assert choice.time_limit == slurm_time(math.ceil(high / 0.8 / 60))
    assert "5 shards, the fewest" in choice.reasons[0]
    assert "time limit" in choice.reasons[1]


def test_a_target_wall_time_is_met_with_the_fewest_gpu_hours() -> None:
    cost = _fake_cost(load=600, work=8 * 3600)
    limit = Limit(minutes=48 * 60, source="max_time")
    choice = choose(cost, shards=None, replicas=8, limit=limit, auto_time=True,
                    target_wall_s=3 * 3600)  # fmt: skip
    # Parallelism k = S × R: 1.5 × (600 s + 8 h / k) ≤ 3 h needs k ≥ 4.4; k = 5 is cheapest.
    assert (choice.shards, choice.replicas) == (1, 5)  # replicas in one job before shards
    with pytest.raises(EstimateError, match="No layout meets --target-wall"):
        choose(cost, shards=None, replicas=2, limit=limit, auto_time=True, target_wall_s=600)


def test_an_automatic_time_limit_beyond_the_site_maximum_is_refused() -> None:
    cost = _fake_cost(load=60, work=100 * 3600)
    with pytest.raises(EstimateError, match="Use --shards auto"):
        choose(cost, shards=1, replicas=1, limit=Limit(minutes=60, source="x"), auto_time=True,
               max_minutes=24 * 60)  # fmt: skip


def test_history_reads_finished_runs_of_the_results_folder(tmp_path: Path) -> None:
    from evalpipe.cli import main

    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic"]
    assert main([*argv, "--limit", "3", "--out", str(tmp_path / "a")]) == 0
    (tmp_path / "b").mkdir()  # a run that never wrote a manifest calibrates nothing
    jobs = load_history([tmp_path, tmp_path / "missing"], load_gpus())
    assert [j.path.name for j in jobs] == ["a"]
    (job,) = jobs
    assert (job.preset, job.backend, job.layout, job.attempts) == (
        "tiny_random",
        "fake",
        (1, 1, 1),
        1,
    )
    (task,) = job.tasks
    assert (task.task, task.samples, task.completions) == ("arithmetic", 3, 3)
    assert task.generated_tokens > 0 and job.wall_s > 0
    # The fake engine's answers say nothing about the model's lengths.
    preset = load_preset("tiny_random")
    work = task_work(load_task("arithmetic"), preset, limit=3, history=jobs, counter=None)
    assert "no past run of the task" in work.sources[1]


def test_past_runs_give_the_scoring_time_of_a_code_task(tmp_path: Path) -> None:
    """A job's `score:coding` time is shared among its coding tasks by samples; a code task's
    estimate then scores at that measured rate instead of the sandbox's best case."""
    from evalpipe.estimate.history import _tasks

    samples = tmp_path / "samples.jsonl"
    rows = [("humaneval", "coding")] * 3 + [("mbpp", "coding")] + [("arithmetic", "math")] * 2
    write_samples(samples, [
        SampleRecord(task=t, category=c, sample_id=f"{t}-{i}", prompt="?", completions=("x",),
                     extracted=(None,), scores={}, prompt_tokens=5, completion_tokens=(10,))
        for i, (t, c) in enumerate(rows)
    ])  # fmt: skip
    timings = Timings({"score:coding": 8.0, "generate:math": 1.0})
    records = {r.task: r for r in _tasks(samples, timings)}
    assert records["humaneval"].score_s == pytest.approx(6.0)
    assert records["mbpp"].score_s == pytest.approx(2.0)
    assert records["arithmetic"].score_s == 0.0  # no score:math recorded

    preset = load_preset("smollm2_135m")
    job = dataclasses.replace(_past(preset="smollm2_135m"), tasks=(records["humaneval"],))
    work = task_work(load_task("humaneval"), preset, limit=60, history=[job], counter=None)
    assert work.score_s.mid == pytest.approx(2.0)
    assert "scoring time of 1 past job(s) of this preset" in work.sources
    alone = task_work(load_task("humaneval"), preset, limit=60, history=[], counter=None)
    assert alone.score_s.mid < 0.1  # the sandbox's own cost per program


def test_the_long_context_probe_separates_attention_from_the_per_sequence_cost() -> None:
    """Steps made from known costs come back out of the fit; without the long-context probe
    (an older record) the batch line stands, with the KV read at the device's bandwidth."""
    fixed, per_seq, per_ctx = 0.01, 0.0004, 2e-5

    def point(batch: int, prompt: int) -> ProbePoint:
        ctx = prompt + 16  # the mean context while 32 tokens decode
        step = fixed + batch * per_seq + batch * ctx * per_ctx
        return ProbePoint(batch=batch, prompt_tokens=prompt * batch, completion_tokens=32 * batch,
                          prefill_tok_s=4000.0, decode_tok_s=batch / step)  # fmt: skip

    cpu = get_gpu("cpu")
    preset, plan = _plan("smollm2_135m", gpu=cpu, gpus=1)
    short = tuple(point(b, 60) for b in (1, 4, 16, 64))
    cal = dataclasses.replace(_calibration(0.02, 0.003), probe=(*short, point(16, 480)))
    rates = from_smoke(cal, preset, cpu, plan)
    assert (rates.fixed_s, rates.seq_s, rates.ctx_s) == (
        pytest.approx(fixed),
        pytest.approx(per_seq),
        pytest.approx(per_ctx),
    )
    older = from_smoke(dataclasses.replace(cal, probe=short), preset, cpu, plan)
    assert older.seq_s == pytest.approx(per_seq + 76 * per_ctx)  # the context folded in
    assert older.ctx_s < per_ctx / 10  # the bandwidth bound: a memory read, not attention
