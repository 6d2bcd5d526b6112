"""summary.json numbers, checked by hand."""

from __future__ import annotations

import math
import random

import pytest

from evalpipe.monitor import DeviceSummary
from evalpipe.rundir.aggregation import combine_devices
from evalpipe.rundir.manifest import PlannedTask
from evalpipe.rundir.samplelog import SampleRecord
from evalpipe.rundir.summary import summarize
from evalpipe.rundir.summarytext import format_summary


def rec(task: str, category: str, i: int, **scores: float) -> SampleRecord:
    return SampleRecord(
        task=task,
        category=category,
        sample_id=str(i),
        prompt="p",
        completions=("a", "b"),
        extracted=("a", "b"),
        scores=scores,
        prompt_tokens=10,
        completion_tokens=(3, 4),
    )


PLANNED = [
    PlannedTask(name="a", category="math", n_total=4),
    PlannedTask(name="b", category="math", n_total=3),
    PlannedTask(name="c", category="code", n_total=1),
]
RECORDS = [
    *(rec("a", "math", i, accuracy=v) for i, v in enumerate([1.0, 0.0, 1.0, 1.0])),
    rec("b", "math", 0, accuracy=0.0),
    rec("b", "math", 1, accuracy=1.0),
    rec("c", "code", 0, **{"pass@1": 0.5, "pass@2": 1.0}),
]


def make(records=RECORDS, **overrides):
    kwargs = {
        "run_id": "r",
        "preset": "p",
        "planned": PLANNED,
        "timings": {"load": 2.0, "generate:math": 3.0, "score:math": 1.0, "generate:code": 1.0},
        "wall_s": 10.0,
        "devices": [],
        "gpus": 0,
        "oom_fallback": [],
    }
    return summarize(records, **{**kwargs, **overrides})


def test_task_mean_and_stderr() -> None:
    s = make().to_dict()  # summary.json's shape
    a = s["tasks"]["a"]
    # [1,0,1,1]: mean 0.75; sample sd = sqrt((3·0.25² + 0.75²)/3) = 0.5; stderr 0.5/√4.
    # Wilson 3/4: [0.3006, 0.9544].
    assert a["metrics"]["accuracy"] == pytest.approx(
        {"mean": 0.75, "stderr": 0.25, "n": 4, "ci_low": 0.3006, "ci_high": 0.9544,
         "ci_method": "wilson"}, abs=1e-4
    )  # fmt: skip
    assert (a["n"], a["n_total"], a["category"]) == (4, 4, "math")
    b = s["tasks"]["b"]  # [0,1]: sd √0.5, stderr √0.5/√2 = 0.5; one sample still missing
    assert b["metrics"]["accuracy"] == pytest.approx(
        {"mean": 0.5, "stderr": 0.5, "n": 2, "ci_low": 0.0945, "ci_high": 0.9055,
         "ci_method": "wilson"}, abs=1e-4
    )  # fmt: skip
    assert (b["n"], b["n_total"]) == (2, 3)
    c = s["tasks"]["c"]["metrics"]  # n = 1 has no spread
    # One non-binary value: the bootstrap has nothing to resample; a 0/1 value still gets
    # Wilson's interval, which does not collapse at 100 %.
    assert c["pass@1"] == {"mean": 0.5, "stderr": 0.0, "n": 1, "ci_low": 0.5, "ci_high": 0.5,
                           "ci_method": "bootstrap"}  # fmt: skip
    assert c["pass@2"] == pytest.approx(
        {"mean": 1.0, "stderr": 0.0, "n": 1, "ci_low": 0.2065, "ci_high": 1.0,
         "ci_method": "wilson"}, abs=1e-4
    )  # fmt: skip


def test_category_micro_pools_samples_macro_averages_tasks() -> None:
    math_cat = make().to_dict()["categories"]["math"]
    # micro over [1,0,1,1,0,1]: mean 4/6; sd = sqrt((4·(1/3)² + 2·(2/3)²)/5) = sqrt(12/45)
    assert math_cat["micro"]["accuracy"]["mean"] == pytest.approx(4 / 6)
    assert math_cat["micro"]["accuracy"]["stderr"] == pytest.approx(math.sqrt(12 / 45) / 6**0.5)
    assert math_cat["micro"]["accuracy"]["n"] == 6
    assert math_cat["macro"]["accuracy"] == pytest.approx({"mean": 0.625, "n_tasks": 2})


def test_counts_completeness_and_throughput() -> None:
    s = make().to_dict()
    assert (s["n_done"], s["n_total"], s["complete"]) == (7, 8, False)
    t = s["throughput"]
    assert (t["prompt_tokens"], t["generated_tokens"]) == (70, 49)
    assert (t["load_s"], t["generate_s"], t["wall_s"]) == (2.0, 4.0, 10.0)
    assert t["tokens_per_s"] == pytest.approx(49 / 4.0)
    assert t["tokens_per_s_per_gpu"] is None and t["gpus"] == 0
    full = make(planned=[PlannedTask(name="a", category="math", n_total=4)], records=RECORDS[:4])
    assert full.complete is True
    assert list(full.categories) == ["math"]


def test_a_run_that_generated_nothing_has_no_token_rate() -> None:
    import dataclasses

    scored_only = [dataclasses.replace(r, completion_tokens=(0,)) for r in RECORDS]
    devices = [DeviceSummary(device="gpu0", host="n1", name="H100", energy_j=50.0)]
    summary = make(records=scored_only, devices=devices, gpus=1)
    s = summary.to_dict()
    t = s["throughput"]  # multiple choice by log-probabilities: options scored, none generated
    assert t["generated_tokens"] == 0 and t["generate_s"] == 4.0
    assert t["tokens_per_s"] is None and t["tokens_per_s_per_gpu"] is None
    assert s["devices"][0]["j_per_token"] is None
    assert "; nothing generated, options scored in 4.0 s; load 2.0 s" in format_summary(summary)


def test_per_gpu_rate_and_joules_per_token() -> None:
    devices = [
        DeviceSummary(device="gpu0", host="n1", name="H100", peak_memory_gib=70.0,
                      mean_util_pct=90.0, energy_j=980.0),
        DeviceSummary(device="gpu1", host="n1", name="H100", peak_memory_gib=71.0,
                      mean_util_pct=80.0, energy_j=None),
    ]  # fmt: skip
    s = make(devices=devices, gpus=2).to_dict()
    assert s["throughput"]["tokens_per_s_per_gpu"] == pytest.approx(49 / 4.0 / 2)
    assert s["devices"][0]["j_per_token"] == pytest.approx(980.0 / 49)
    assert s["devices"][1]["j_per_token"] is None


def test_record_order_does_not_change_a_single_bit() -> None:
    rng = random.Random(3)
    records = [rec("a", "math", i, accuracy=rng.random() * 1e3) for i in range(200)]
    planned = [PlannedTask(name="a", category="math", n_total=200)]
    shuffled = records[:]
    random.Random(11).shuffle(shuffled)
    assert make(records, planned=planned) == make(shuffled, planned=planned)


def test_devices_of_shards_combine() -> None:
    first = [DeviceSummary(device="gpu0", host="n1", name="H100", peak_memory_gib=60.0,
                           mean_util_pct=90.0, energy_j=100.0)]  # fmt: skip
    second = [DeviceSummary(device="gpu0", host="n1", name="H100", peak_memory_gib=70.0,
                            mean_util_pct=60.0, energy_j=50.0)]  # fmt: skip
    (gpu,) = combine_devices([(first, 10.0), (second, 20.0)])
    assert gpu.peak_memory_gib == 70.0
    assert gpu.energy_j == 150.0
    assert gpu.mean_util_pct == pytest.approx((90 * 10 + 60 * 20) / 30)


def test_table_lists_tasks_and_categories() -> None:
    text = format_summary(make())
    assert "0.750" in text and "[0.301, 0.954]" in text  # Wilson 3/4
    assert "(micro)" in text and "(macro)" in text
    assert "7/8 samples (INCOMPLETE)" in text
