"""`evalpipe smoke`: the calibration record, its table and the memory-vs-plan comparison (with
the fake NVML and the fake engine), and the record's round trip through load_calibrations."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import pytest

from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.preset import Preset, load_preset
from evalpipe.core.errors import RunDirError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.estimate.calibration import Calibration, load_calibrations, table
from evalpipe.monitor.fake_nvml import GIB, FakeGpu, FakeNvml
from evalpipe.planning import planner
from evalpipe.run.smokeprobe import BATCHES, LONG_CONTEXT, run_smoke

KV_TOKENS = 400_000


class EngineWithKvCapacity(FakeEngine):
    """The fake engine, reporting a KV capacity the way VllmEngine.describe() does, and
    remembering every prompt it was given."""

    prompts: ClassVar[list[str]] = []

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "resolved": {"kv_cache_tokens": KV_TOKENS}}

    def add(self, requests) -> None:
        self.prompts.extend(str(r.prompt) for r in requests)
        super().add(requests)


def open_fake(backend: str, preset: Preset, settings: EngineSettings) -> FakeEngine:
    return EngineWithKvCapacity(preset, settings)


@pytest.fixture
def smoked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Calibration, Any]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    EngineWithKvCapacity.prompts.clear()
    preset = load_preset("llama3_1_8b")
    plan = planner.plan(preset, get_gpu("h100-80gb"), gpus_per_node=1)
    # 0.5 GiB in use before the load (the CUDA context), 70.5 GiB from the load on.
    gpu = FakeGpu(uuid="GPU-0", memory_used_bytes=(GIB // 2, int(70.5 * GIB)))
    calibration = run_smoke(
        preset,
        plan,
        backend="fake",
        out=tmp_path / "run",
        settings=EngineSettings(),
        nvml=FakeNvml([gpu]),
        opener=open_fake,
    )
    return calibration, plan


def test_smoke_measures_memory_per_gpu_beside_the_plan(smoked) -> None:
    calibration, plan = smoked
    (device,) = calibration.devices
    assert device.device == "gpu0"
    assert (device.used_before_gib, device.used_after_gib) == (0.5, 70.5)
    assert device.total_gib == 80.0 and device.free_gib == 9.5
    # The engine's capacity × the planner's bytes per token: llama3_1_8b caches 128 KiB a token.
    assert device.kv_cache_gib == pytest.approx(KV_TOKENS * 128 * 1024 / GIB)
    assert device.weights_and_overhead_gib == pytest.approx(70.0 - device.kv_cache_gib)
    p = calibration.planned
    assert (p.weights_gib, p.kv_cache_gib, p.overhead_gib) == (
        plan.weights_per_gpu_gib,
        plan.kv_cache_per_gpu_gib,
        plan.overhead_per_gpu_gib,
    )
    assert p.kv_cache_tokens == int(plan.kv_cache_per_gpu_gib * GIB / (128 * 1024))
    assert calibration.kv_cache_tokens == KV_TOKENS


def test_the_table_says_by_how_much_the_plan_was_off(smoked) -> None:
    calibration, plan = smoked
    text = table(calibration)
    measured = 70.0 - KV_TOKENS * 128 * 1024 / GIB
    expected = plan.weights_per_gpu_gib + plan.overhead_per_gpu_gib
    off = f"{measured - expected:+.2f} ({(measured - expected) / expected:+.0%})"
    row = next(line for line in text.splitlines() if line.startswith("gpu0"))
    assert row.split()[1:4] == ["80.00", "70.50", "9.50"] and row.endswith(off)
    kv_off = f"{KV_TOKENS / calibration.planned.kv_cache_tokens - 1:+.0%} vs plan"
    assert f"KV cache: {KV_TOKENS} tokens, planned {calibration.planned.kv_cache_tokens}" in text
    assert kv_off in text


def test_smoke_answers_both_prompts_and_probes_each_batch(smoked) -> None:
    calibration, _ = smoked
    assert set(calibration.answers) == {"plain", "chat"}
    assert [q.batch for q in calibration.probe] == [*BATCHES, LONG_CONTEXT[0]]
    assert all(q.prompt_tokens > 0 and q.prefill_tok_s > 0 for q in calibration.probe)
    # The last probe holds the same batch as one before it with several times the context.
    long, same_batch = calibration.probe[-1], calibration.probe[BATCHES.index(LONG_CONTEXT[0])]
    assert long.prompt_tokens > 4 * same_batch.prompt_tokens
    # No probe prompt repeats one before it (a prefix cache would make its prefill a lookup),
    # nor starts like one: they differ from their first characters on.
    heads = [p.split(":")[0] for p in EngineWithKvCapacity.prompts if "quick brown fox" in p]
    assert len(heads) == len(set(heads)) == 2 * 2 * (sum(BATCHES) + LONG_CONTEXT[0])
    assert set(calibration.phases_s) == {"import", "load", "first_token"}


def test_a_calibration_round_trips_through_run_dir_and_shared_cache(smoked, tmp_path: Path) -> None:
    calibration, _ = smoked
    paths = calibration.write(tmp_path / "run", tmp_path / "shared")
    assert [p.name for p in paths] == ["llama3_1_8b-h100-80gb-tp1-pp1.calibration.json"] * 2
    assert paths[1].parent == tmp_path / "shared" / "calibrations"
    assert load_calibrations([tmp_path / "run", paths[1]]) == [calibration, calibration]
    assert json.loads(paths[0].read_text())["schema"] == 1


def test_an_unreadable_calibration_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.calibration.json"
    bad.write_text('{"schema": 99}')
    with pytest.raises(RunDirError, match=f"{bad} is not a calibration record"):
        load_calibrations([tmp_path])


def test_the_measured_offset_fed_back_as_overhead_correction_moves_the_plan(
    smoked, tmp_path: Path
) -> None:
    """docs/planner.md: put the smoke table's `off` into the profile's overhead_correction_gib."""
    from evalpipe.jobs.jobspec import JobOptions
    from evalpipe.jobs.prepare import prepare

    calibration, plan = smoked
    (device,) = calibration.devices
    off = device.weights_and_overhead_gib - (plan.weights_per_gpu_gib + plan.overhead_per_gpu_gib)
    site = tmp_path / "site.yaml"
    site.write_text(
        "gpu: h100-80gb\ngpus_per_node: 1\ncpus_per_node: 8\nmemory_per_node_gib: 64\n"
        f"overhead_correction_gib: {off:.3f}\n"
    )
    corrected = prepare("llama3_1_8b", str(site), JobOptions(), tmp_path / "r").spec.plan
    assert corrected.weights_per_gpu_gib + corrected.overhead_per_gpu_gib == pytest.approx(
        device.weights_and_overhead_gib, abs=0.002
    )
    assert corrected.kv_cache_per_gpu_gib < plan.kv_cache_per_gpu_gib


def test_the_long_context_probe_fits_the_models_context() -> None:
    from evalpipe.estimate.calibration import ProbePoint
    from evalpipe.run.smokeprobe import DECODE_TOKENS, PROMPT_REPEATS, _long_repeats

    # A byte-level tokenizer: ~27 tokens a repeat, so 8× the short prompt would not fit 1024.
    short = ProbePoint(batch=1, prompt_tokens=27 * PROMPT_REPEATS, completion_tokens=32,
                       prefill_tok_s=1.0, decode_tok_s=1.0)  # fmt: skip
    repeats = _long_repeats(short, 1024)
    assert 2 * PROMPT_REPEATS <= repeats < LONG_CONTEXT[1]
    assert repeats * 27 + DECODE_TOKENS + 16 <= 1024
    assert _long_repeats(short, 512) is None  # under twice the short context: no long probe
    typical = dataclasses.replace(short, prompt_tokens=5 * PROMPT_REPEATS)  # ~5 tokens a repeat
    assert _long_repeats(typical, 2048) == LONG_CONTEXT[1]
