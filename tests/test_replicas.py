"""Data-parallel replicas and local planning: slices, the pool of engine processes, and runs
with the fake engine in real replica processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from evalpipe.catalog.gpus import load_gpus
from evalpipe.catalog.preset import load_preset, preset_names
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, DoesNotFitError, LayoutError
from evalpipe.monitor.fake_nvml import FakeGpu, FakeNvml, fake_uuid
from evalpipe.planning import planner
from evalpipe.run.localplan import LocalGpu, plan_local, visible_gpus
from evalpipe.run.replicas import core_slices, device_slices
from evalpipe.tasks import load_task

REPO = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"


def test_device_and_core_slices() -> None:
    assert device_slices(2, 2, ["0", "1", "2", "3"]) == [
        {"CUDA_VISIBLE_DEVICES": "0,1"},
        {"CUDA_VISIBLE_DEVICES": "2,3"},
    ]
    uuids = [fake_uuid(i) for i in range(2)]
    assert device_slices(2, 1, uuids)[1] == {"CUDA_VISIBLE_DEVICES": uuids[1]}
    with pytest.raises(ConfigError, match=r"need 6 GPUs; 4 are visible"):
        device_slices(3, 2, ["0", "1", "2", "3"])
    assert core_slices(2, [0, 1, 2, 3]) == [
        {"VLLM_CPU_OMP_THREADS_BIND": "0,1"},
        {"VLLM_CPU_OMP_THREADS_BIND": "2,3"},
    ]
    with pytest.raises(ConfigError, match="at least one core each"):
        core_slices(3, [0, 1])


@pytest.mark.parametrize("name", sorted(preset_names()))
def test_every_preset_fills_an_8_gpu_node_with_replicas(name: str) -> None:
    preset = load_preset(name)
    plan = planner.plan(preset, load_gpus()["h100-80gb"], gpus_per_node=8, replicas=None)
    per = plan.tensor_parallel_size * plan.pipeline_parallel_size
    if plan.nodes > 1:
        assert plan.replicas == 1  # a model spanning nodes runs one copy
    else:
        assert plan.replicas == 8 // per
        assert plan.total_gpus == plan.replicas * per <= 8
        idle = [n for n in plan.notes if "stay idle" in n]
        assert bool(idle) == (8 % per != 0)


def test_explicit_replicas_are_validated() -> None:
    gpu = load_gpus()["h100-80gb"]
    llama8b = load_preset("llama3_1_8b")
    assert planner.plan(llama8b, gpu, gpus_per_node=8, replicas=None).replicas == 8
    three = planner.plan(llama8b, gpu, gpus_per_node=8, replicas=3)
    assert (three.replicas, three.total_gpus) == (3, 3)
    assert any(
        "5 GPU(s) of the node stay idle with 3 replica(s): as asked" in n for n in three.notes
    )
    with pytest.raises(LayoutError, match=r"--replicas 9 × 1 GPU\(s\) each .* a node has 8"):
        planner.plan(llama8b, gpu, gpus_per_node=8, replicas=9)
    with pytest.raises(LayoutError, match=r"spans 2 nodes.*--shards"):
        planner.plan(load_preset("falcon_180b"), gpu, gpus_per_node=4, replicas=2)


def test_a_7b_preset_renders_8_replicas_in_one_job() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "evalpipe",
            "render",
            "--preset",
            "llama3_1_8b",
            "--cluster",
            "example-h100-site",
            "--out",
            "/scratch/run",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --gres=gpu:h100:8" in done.stdout
    assert "--replicas 8" in done.stdout and "--tp 1" in done.stdout


def test_local_plan_from_visible_gpus() -> None:
    gpus = [LocalGpu(entry=str(i), name=H100, memory_gib=79.6) for i in range(8)]
    llama8b = load_preset("llama3_1_8b")
    layout = plan_local(llama8b, tp=None, pp=None, replicas=None, max_model_len=None, gpus=gpus)
    assert (layout.tp, layout.replicas, layout.device) == (1, 8, "8 × h100-80gb")
    assert layout.envs[7] == {"CUDA_VISIBLE_DEVICES": "7"}
    llama70b = load_preset("llama2_70b")
    layout = plan_local(llama70b, tp=None, pp=None, replicas=None, max_model_len=None, gpus=gpus)
    assert layout.tp * layout.pp > 1 and layout.replicas == 8 // (layout.tp * layout.pp)
    with pytest.raises(DoesNotFitError, match=r"shows 1 × h100-80gb"):
        plan_local(llama70b, tp=None, pp=None, replicas=None, max_model_len=None, gpus=gpus[:1])
    odd = [LocalGpu(entry="0", name="NVIDIA Imaginary X1", memory_gib=10.0)]
    with pytest.raises(ConfigError, match="not in the GPU catalogue"):
        plan_local(llama8b, tp=None, pp=None, replicas=None, max_model_len=None, gpus=odd)
    # A job passes its planned layout: no catalogue needed, the slices follow the visible list.
    given = plan_local(llama8b, tp=2, pp=1, replicas=2, max_model_len=None, gpus=odd * 4)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in given.envs] == ["0,0", "0,0"]


def test_cpu_machine_keeps_one_replica_unless_asked() -> None:
    tiny = load_preset("tiny_random")
    layout = plan_local(tiny, tp=None, pp=None, replicas=None, max_model_len=None, gpus=[])
    assert (layout.tp, layout.pp, layout.replicas, layout.envs) == (1, 1, 1, ())
    assert layout.device.startswith("cpu (")


def test_visible_gpus_follow_cuda_visible_devices_by_uuid(monkeypatch) -> None:
    nvml = FakeNvml([FakeGpu(uuid=fake_uuid(i)) for i in range(4)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{fake_uuid(2)},{fake_uuid(0)}")
    gpus = visible_gpus(nvml)
    assert [g.entry for g in gpus] == [fake_uuid(2), fake_uuid(0)]
    assert gpus[0].name == H100 and gpus[0].memory_gib == 80.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert [g.entry for g in visible_gpus(nvml)] == ["3"]


# -- runs in replica processes (fake engine) ---------------------------------------------------

RUN = ["--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic", "--limit", "24"]


ARITHMETIC = load_task("arithmetic").sampling.to_dict()


def evalpipe_run(out: Path, *extra: str, delay: str = "0") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVALPIPE_FAKE_DELAY_S": delay}
    return subprocess.Popen(
        [sys.executable, "-m", "evalpipe", "run", *RUN, *extra, "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def by_id(out: Path) -> list[dict]:
    records = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    return sorted(records, key=lambda r: r["sample_id"])


@pytest.fixture(scope="module")
def one_replica(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    proc = evalpipe_run(out, "--replicas", "1")
    assert proc.wait(timeout=120) == exitcodes.OK, proc.communicate()[1]
    return out


def test_two_replicas_equal_one(tmp_path: Path, one_replica: Path) -> None:
    out = tmp_path / "run"
    proc = evalpipe_run(out, "--replicas", "2", "--window", "2", delay="0.05")
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == exitcodes.OK, stderr
    assert by_id(out) == by_id(one_replica)
    engine = json.loads((out / "manifest.json").read_text())["engine"]
    assert engine["backend"] == "replicas" and len(engine["replicas"]) == 2
    # Each replica's description is its latest: what it generated with included.
    assert [r["sampling"] for r in engine["replicas"]] == [[ARITHMETIC]] * 2


def _cmdline(process: Any) -> str:
    """A child's command line; "" for one that ended meanwhile (a short-lived helper process)."""
    import psutil

    try:
        return " ".join(process.cmdline())
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return ""


def test_a_dead_replica_fails_the_run_by_name_and_a_rerun_completes(
    tmp_path: Path, one_replica: Path
) -> None:
    import psutil

    out = tmp_path / "run"
    proc = evalpipe_run(out, "--replicas", "2", "--window", "1", delay="0.3")
    deadline = time.monotonic() + 60
    children: list = []
    while len(children) < 2:  # the two replica processes
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        children = [  # the replicas, not multiprocessing's resource tracker
            c for c in psutil.Process(proc.pid).children() if "spawn_main" in _cmdline(c)
        ]
        time.sleep(0.05)
    while not (out / "samples.jsonl").exists() or not (out / "samples.jsonl").read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    os.kill(children[1].pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == exitcodes.ERROR, stderr
    assert f"(pid {children[1].pid}, VLLM_CPU_OMP_THREADS_BIND=" in stderr and "died" in stderr
    assert "Rerun the same command to resume" in stderr
    written = by_id(out)
    assert 0 < len(written) < 24 and len({r["sample_id"] for r in written}) == len(written)
    rerun = evalpipe_run(out, "--replicas", "2")
    _, stderr = rerun.communicate(timeout=120)
    assert rerun.returncode == exitcodes.OK, stderr
    assert by_id(out) == by_id(one_replica)
