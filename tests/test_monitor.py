"""The sampler: metrics.csv rows, phases, energy, summaries, failures, CPU fallback.

Most tests use a huge interval, so samples happen exactly at start, at each set_phase and at
stop, and every value can be checked by hand against the fake's scripts.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pynvml
import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.monitor import COLUMNS, DeviceSummary, Monitor, device_summaries
from evalpipe.monitor.cpu import CpuSource
from evalpipe.monitor.fake_nvml import GIB, FakeGpu, FakeNvml, fake_uuid
from evalpipe.rundir.layout import RunDir


def dicts(summaries: list[DeviceSummary]) -> list[dict]:
    return [d.to_dict() for d in summaries]


HOUR = 3600.0  # an interval that never ticks within a test
MIG_UUID = "MIG-5c89e4d8-4a5e-5b3c-9f0d-0123456789ab"


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def scripted_gpu(n: int, **kw) -> FakeGpu:
    return FakeGpu(
        uuid=fake_uuid(n),
        memory_used_bytes=(10 * GIB, 20 * GIB, 30 * GIB, 25 * GIB),
        util_pct=(0, 50, 100, 90),
        mem_util_pct=(0, 20, 40, 30),
        temperature_c=(35, 50, 65, 60),
        power_mw=(100_000, 300_000, 700_000, 650_000),
        sm_clock_mhz=(345, 1980, 1980, 1755),
        energy_mj=(5_000_000, 5_100_000, 5_350_000, 5_400_000),
        **kw,
    )


def test_rows_phases_and_summary_for_the_owned_gpu_only(tmp_path: Path) -> None:
    fake = FakeNvml([scripted_gpu(0), scripted_gpu(1)])
    out = tmp_path / "metrics.csv"
    with Monitor(out, interval_s=HOUR, nvml=fake, host="nodeA", visible_devices="1") as monitor:
        monitor.set_phase("load")
        monitor.set_phase("generate:math")
    devices = dicts(monitor.stop())

    assert out.read_text().splitlines()[0] == ",".join(COLUMNS)
    got = rows(out)
    assert [(r["host"], r["device"], r["phase"]) for r in got] == [
        ("nodeA", "gpu0", "start"),
        ("nodeA", "gpu0", "load"),
        ("nodeA", "gpu0", "generate:math"),
        ("nodeA", "gpu0", "generate:math"),  # the last sample, taken by stop()
    ]
    values = [
        {k: r[k] for k in COLUMNS if k not in ("time_s", "host", "device", "phase")} for r in got
    ]
    assert values == [
        dict(memory_used_gib="10", memory_total_gib="80", util_pct="0", mem_util_pct="0",
             temperature_c="35", power_w="100", sm_clock_mhz="345", energy_j="0"),
        dict(memory_used_gib="20", memory_total_gib="80", util_pct="50", mem_util_pct="20",
             temperature_c="50", power_w="300", sm_clock_mhz="1980", energy_j="100"),
        dict(memory_used_gib="30", memory_total_gib="80", util_pct="100", mem_util_pct="40",
             temperature_c="65", power_w="700", sm_clock_mhz="1980", energy_j="350"),
        dict(memory_used_gib="25", memory_total_gib="80", util_pct="90", mem_util_pct="30",
             temperature_c="60", power_w="650", sm_clock_mhz="1755", energy_j="400"),
    ]  # fmt: skip
    times = [float(r["time_s"]) for r in got]
    assert times == sorted(times) and times[0] == 0.0

    assert devices == [
        {
            "device": "gpu0",
            "host": "nodeA",
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": fake_uuid(1),
            "peak_memory_gib": 30.0,
            "mean_util_pct": 60.0,  # (0 + 50 + 100 + 90) / 4
            "energy_j": 400.0,  # (5 400 000 - 5 000 000) mJ
            "energy_source": "counter",
            "samples": 4,
        }
    ]
    # The node's other GPU was never read, and NVML was shut down as often as it was started.
    assert not any(uuid == fake_uuid(0) for uuid, _ in fake.reads)
    assert fake.initialized == 0


def test_phase_set_before_start_tags_the_first_row(tmp_path: Path) -> None:
    monitor = Monitor(
        tmp_path / "m.csv", interval_s=HOUR, nvml=FakeNvml([scripted_gpu(0)]), visible_devices=None
    )
    monitor.set_phase("load")
    with monitor:
        pass
    assert [r["phase"] for r in rows(tmp_path / "m.csv")] == ["load", "load"]


def test_stop_is_idempotent(tmp_path: Path) -> None:
    fake = FakeNvml([scripted_gpu(0)])
    monitor = Monitor(tmp_path / "m.csv", interval_s=HOUR, nvml=fake, visible_devices="0").start()
    first = dicts(monitor.stop())
    assert dicts(monitor.stop()) == first
    monitor.set_phase("late")  # after stop: no row, no error
    assert len(rows(tmp_path / "m.csv")) == 2


def test_interval_ticks(tmp_path: Path) -> None:
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(0))])
    with Monitor(tmp_path / "m.csv", interval_s=0.05, nvml=fake, visible_devices="0"):
        time.sleep(0.5)
    times = [float(r["time_s"]) for r in rows(tmp_path / "m.csv")]
    # ~11 rows (start, ~9 ticks, stop); loose bounds for a busy CI machine.
    assert 5 <= len(times) <= 13
    assert times == sorted(times)
    # Ticks follow a fixed schedule (a late one does not shift the rest): mean spacing ≈ interval.
    ticks = times[1:-1]
    assert 0.04 <= (ticks[-1] - ticks[0]) / (len(ticks) - 1) <= 0.1, times


def test_unsupported_readings_stay_empty_and_energy_is_integrated_from_power(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gpu = FakeGpu(
        uuid=fake_uuid(0),
        power_mw=(100_000, 300_000, 500_000, 200_000),
        errors={
            "energy": pynvml.NVML_ERROR_NOT_SUPPORTED,
            "temperature": pynvml.NVML_ERROR_NOT_SUPPORTED,
        },
    )
    out = tmp_path / "m.csv"
    with (
        caplog.at_level(logging.INFO),
        Monitor(out, interval_s=HOUR, nvml=FakeNvml([gpu]), visible_devices="0") as monitor,
    ):
        for phase in ("load", "generate:math"):
            time.sleep(0.05)
            monitor.set_phase(phase)
        time.sleep(0.05)
    (summary,) = dicts(monitor.stop())

    got = rows(out)
    assert {r["temperature_c"] for r in got} == {""}
    assert [r["power_w"] for r in got] == ["100", "300", "500", "200"]
    # Trapezoids between samples, recomputed from the CSV's own (ms-rounded) times.
    t = [float(r["time_s"]) for r in got]
    p = [100, 300, 500, 200]
    expected = [0.0]
    for i in range(1, 4):
        expected.append(expected[-1] + (p[i - 1] + p[i]) / 2 * (t[i] - t[i - 1]))
    assert [float(r["energy_j"]) for r in got] == pytest.approx(expected, abs=0.5)
    assert expected[-1] > 40  # ~0.15 s at 100-500 W: the check is not vacuous
    assert summary["energy_source"] == "integrated"
    assert summary["energy_j"] == pytest.approx(expected[-1], abs=0.5)
    assert caplog.text.count("has no NVML energy counter") == 1
    assert caplog.text.count("does not report temperature") == 1


def test_no_energy_without_counter_or_power(tmp_path: Path) -> None:
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    gpu = FakeGpu(uuid=fake_uuid(0), errors={"energy": not_supported, "power": not_supported})
    with Monitor(tmp_path / "m.csv", interval_s=HOUR, nvml=FakeNvml([gpu]), visible_devices="0"):
        pass
    assert {(r["power_w"], r["energy_j"]) for r in rows(tmp_path / "m.csv")} == {("", "")}


def test_a_failing_reading_is_logged_once_and_sampling_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gpu = scripted_gpu(0, errors={"utilization": pynvml.NVML_ERROR_GPU_IS_LOST})
    out = tmp_path / "m.csv"
    with Monitor(out, interval_s=HOUR, nvml=FakeNvml([gpu]), visible_devices="0") as monitor:
        for phase in ("load", "generate:a", "generate:b"):
            monitor.set_phase(phase)
    (summary,) = dicts(monitor.stop())
    got = rows(out)
    assert len(got) == 5
    assert {(r["util_pct"], r["mem_util_pct"]) for r in got} == {("", "")}
    assert [r["memory_used_gib"] for r in got] == ["10", "20", "30", "25", "25"]
    assert caplog.text.count("reading utilization failed (GPU is lost)") == 1
    assert summary["mean_util_pct"] is None and summary["samples"] == 5


class _BrokenPower(FakeNvml):
    """A driver binding that raises something other than NVMLError (a bug, not a reading)."""

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        raise RuntimeError("binding bug")


def test_an_unexpected_error_stops_sampling_but_never_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "m.csv"
    with Monitor(
        out, interval_s=0.01, nvml=_BrokenPower([scripted_gpu(0)]), visible_devices="0"
    ) as m:
        m.set_phase("load")
        time.sleep(0.05)
    assert dicts(m.stop()) == [
        {
            "device": "gpu0",
            "host": m.host,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": fake_uuid(0),
            "peak_memory_gib": None,
            "mean_util_pct": None,
            "energy_j": None,
            "energy_source": None,
            "samples": 0,
        }
    ]
    assert rows(out) == []
    assert caplog.text.count("stopped sampling after an unexpected error") == 1
    assert "binding bug" in caplog.text


class _BrokenCount(FakeNvml):
    def nvmlDeviceGetCount(self) -> int:
        raise RuntimeError("binding bug")


def test_a_monitor_that_cannot_start_never_stops_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = _BrokenCount([FakeGpu(uuid=fake_uuid(0))])
    with Monitor(tmp_path / "m.csv", interval_s=0.01, nvml=fake, visible_devices="0") as m:
        m.set_phase("load")
    assert dicts(m.stop()) == []
    assert "could not start; the run goes on without metrics" in caplog.text


def test_mig_slice_records_memory_but_not_the_shared_power(tmp_path: Path) -> None:
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    mig = FakeGpu(
        uuid=MIG_UUID,
        name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        memory_total_bytes=10 * GIB,
        memory_used_bytes=(3 * GIB,),
        errors={"utilization": not_supported},
    )
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(0))], mig=[mig])
    with Monitor(tmp_path / "m.csv", interval_s=HOUR, nvml=fake, visible_devices=MIG_UUID) as m:
        pass
    (summary,) = dicts(m.stop())
    row = rows(tmp_path / "m.csv")[0]
    assert (row["device"], row["memory_used_gib"], row["memory_total_gib"]) == ("gpu0", "3", "10")
    assert (row["util_pct"], row["power_w"], row["energy_j"]) == ("", "", "")
    assert (summary["uuid"], summary["energy_j"]) == (MIG_UUID, None)
    assert (MIG_UUID, "power") not in fake.reads


def test_resume_appends_and_continues_time_and_energy(tmp_path: Path) -> None:
    out = tmp_path / "metrics.csv"
    first = FakeNvml([FakeGpu(uuid=fake_uuid(0), energy_mj=(1_000_000, 1_500_000))])
    with Monitor(out, interval_s=HOUR, nvml=first, host="n1", visible_devices="0"):
        pass
    # A kill -9 mid-write leaves half a row; the next attempt must not glue onto it.
    with open(out, "a", encoding="utf-8") as f:
        f.write("0.7,n1,gpu0,gen")
    # The requeued job: the counter has moved on (other work ran on the GPU meanwhile).
    second = FakeNvml([FakeGpu(uuid=fake_uuid(0), energy_mj=(9_000_000, 9_200_000))])
    with Monitor(out, interval_s=HOUR, nvml=second, host="n1", visible_devices="0") as monitor:
        monitor.set_phase("generate:math")
    (summary,) = dicts(monitor.stop())

    lines = out.read_text().splitlines()
    assert lines.count(",".join(COLUMNS)) == 1 and lines[0] == ",".join(COLUMNS)
    got = rows(out)
    assert all(len(r) == len(COLUMNS) and None not in r.values() for r in got)
    assert [r["energy_j"] for r in got] == ["0", "500", "500", "700", "700"]
    times = [float(r["time_s"]) for r in got]
    assert times == sorted(times)
    assert summary["energy_j"] == 700.0 and summary["samples"] == 5


def test_an_earlier_attempt_on_another_node_stays_in_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "metrics.csv"
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(0), energy_mj=(0, 300_000))])
    with Monitor(out, interval_s=HOUR, nvml=fake, host="n1", visible_devices="0"):
        pass
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(5), energy_mj=(0, 200_000))])
    with Monitor(out, interval_s=HOUR, nvml=fake, host="n2", visible_devices="0") as monitor:
        pass
    got = [(d["host"], d["uuid"], d["energy_j"], d["samples"]) for d in dicts(monitor.stop())]
    assert got == [("n2", fake_uuid(5), 200.0, 2), ("n1", None, 300.0, 2)]


def test_a_file_with_other_columns_is_moved_aside(tmp_path: Path) -> None:
    out = tmp_path / "metrics.csv"
    out.write_text("time,gpu,watts\n1,0,100\n")
    with Monitor(
        out, interval_s=HOUR, nvml=FakeNvml([FakeGpu(uuid=fake_uuid(0))]), visible_devices="0"
    ):
        pass
    assert (tmp_path / "metrics.csv.old").read_text() == "time,gpu,watts\n1,0,100\n"
    assert len(rows(out)) == 2


def test_nvml_init_failure_falls_back_to_process_cpu_and_rss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    out = tmp_path / "m.csv"
    busy = [sys.executable, "-c", "import time\nt = time.time() + 0.6\nwhile time.time() < t: pass"]
    with caplog.at_level(logging.WARNING), Monitor(out, interval_s=0.1, nvml=fake) as monitor:
        monitor.set_phase("generate:math")
        subprocess.run(busy, check=True)  # a child, as vLLM's engine core is
    (summary,) = dicts(monitor.stop())
    rss_gib = psutil.Process().memory_info().rss / GIB

    assert caplog.text.count("NVML is unavailable (Driver Not Loaded)") == 1
    assert "recording the CPU % and RSS of this process tree as 'cpu'" in caplog.text
    got = rows(out)
    assert {r["device"] for r in got} == {"cpu"}
    assert {(r["power_w"], r["energy_j"], r["temperature_c"]) for r in got} == {("", "", "")}
    assert all(0.5 * rss_gib < float(r["memory_used_gib"]) < 4 * rss_gib for r in got)
    # The busy child keeps about one CPU of those this process may use.
    assert max(float(r["util_pct"]) for r in got if r["phase"] == "generate:math") > 10
    assert summary["device"] == "cpu" and summary["energy_j"] is None
    assert summary["mean_util_pct"] > 0 and summary["peak_memory_gib"] > 0


def test_no_visible_gpu_falls_back_to_cpu(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([FakeGpu(uuid=fake_uuid(0))])
    with Monitor(tmp_path / "m.csv", interval_s=HOUR, nvml=fake, visible_devices="") as monitor:
        pass
    assert [d["device"] for d in dicts(monitor.stop())] == ["cpu"]
    assert "CUDA_VISIBLE_DEVICES='' names no GPU NVML sees" in caplog.text
    assert fake.initialized == 0 and not fake.reads


def test_the_real_pynvml_without_a_driver_falls_back_to_cpu(tmp_path: Path) -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    with Monitor(tmp_path / "m.csv", interval_s=HOUR) as monitor:
        pass
    assert [d["device"] for d in dicts(monitor.stop())] == ["cpu"]


def test_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"positive number of seconds, got 0"):
        Monitor(tmp_path / "m.csv", interval_s=0)


def test_importing_the_monitor_loads_neither_pynvml_nor_psutil() -> None:
    code = "import sys, evalpipe.monitor; print(sorted({'pynvml', 'psutil'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_per_sample_cost_is_negligible(tmp_path: Path) -> None:
    fake = FakeNvml([scripted_gpu(i) for i in range(8)])
    n = 500
    with Monitor(tmp_path / "m.csv", interval_s=HOUR, nvml=fake, visible_devices=None) as m:
        start = time.perf_counter()
        for i in range(n):
            m.set_phase(f"p{i}")  # each takes one sample of 8 GPUs, written and flushed
        per_sample = (time.perf_counter() - start) / n
    # Measured ~0.3 ms on a 2-core VM; at a 1 s interval even 5 ms would be 0.5 % of one core.
    assert per_sample < 0.005, per_sample


def test_other_nodes_follow_the_runners_phase_and_clock(tmp_path: Path) -> None:
    phase_file = RunDir(tmp_path).phase_file
    worker_csv = RunDir(tmp_path).node_metrics("n2")
    worker = Monitor(
        worker_csv,
        interval_s=0.02,
        nvml=FakeNvml([FakeGpu(uuid=fake_uuid(7), energy_mj=(0, 1000, 2000, 3000, 4000))]),
        host="n2",
        visible_devices="0",
        follow_phase=phase_file,
    ).start()
    time.sleep(0.1)
    assert rows(worker_csv) == []  # the run has not started: nothing recorded yet
    leader_nvml = FakeNvml([FakeGpu(uuid=fake_uuid(0))])
    with Monitor(
        tmp_path / "metrics.csv",
        interval_s=HOUR,
        nvml=leader_nvml,
        host="n1",
        visible_devices="0",
        publish_phase=phase_file,
        node_csvs=RunDir(tmp_path).node_metrics_files,
    ) as leader:
        leader.set_phase("generate:math")
        time.sleep(0.2)
        worker.set_phase("ignored")  # a follower takes its phases from the leader only
    assert worker.leader_stopped.wait(2.0)
    (summary,) = dicts(worker.stop())

    got = rows(worker_csv)
    assert got and {(r["host"], r["device"], r["phase"]) for r in got} <= {
        ("n2", "gpu0", "start"),
        ("n2", "gpu0", "generate:math"),
    }
    assert got[-1]["phase"] == "generate:math"
    # On the leader's clock: within the leader's first and last rows (plus scheduling slack).
    leader_times = [float(r["time_s"]) for r in rows(tmp_path / "metrics.csv")]
    worker_times = [float(r["time_s"]) for r in got]
    assert leader_times[0] - 0.05 <= worker_times[0] <= worker_times[-1] <= leader_times[-1] + 0.05
    assert summary["host"] == "n2" and summary["samples"] == len(got)

    from_files = dicts(device_summaries(RunDir(tmp_path).node_metrics_files()))
    assert [(d["host"], d["device"], d["samples"], d["energy_j"]) for d in from_files] == [
        ("n2", "gpu0", summary["samples"], summary["energy_j"])
    ]
    # The publishing monitor's summaries (summary.json's devices) hold every node's devices.
    assert [(d["host"], d["device"]) for d in dicts(leader.stop())] == [
        ("n1", "gpu0"),
        ("n2", "gpu0"),
    ]


def test_a_follower_that_starts_late_still_reads_the_runs_end(tmp_path: Path) -> None:
    """A node's monitor step may start seconds into a short run (srun and Python start-up):
    it reads once more when the run stops, so that node's energy counts up to the end."""
    phase_file = RunDir(tmp_path).phase_file
    with Monitor(
        tmp_path / "metrics.csv",
        interval_s=HOUR,
        nvml=FakeNvml([FakeGpu(uuid=fake_uuid(0))]),
        host="n1",
        visible_devices="0",
        publish_phase=phase_file,
    ) as leader:
        leader.set_phase("generate:math")
        worker = Monitor(
            RunDir(tmp_path).node_metrics("n2"),
            interval_s=HOUR,  # no tick of its own: only its first reading, then the run's end
            nvml=FakeNvml([FakeGpu(uuid=fake_uuid(7), energy_mj=(0, 5000, 9000))]),
            host="n2",
            visible_devices="0",
            follow_phase=phase_file,
        ).start()
    (summary,) = dicts(worker.stop())
    assert worker.leader_stopped.is_set()
    assert [r["phase"] for r in rows(RunDir(tmp_path).node_metrics("n2"))] == ["generate:math"] * 2
    assert summary["samples"] == 2 and summary["energy_j"] == 5.0


def test_the_cpu_fallback_in_a_job_measures_the_jobs_processes_on_its_node(
    tmp_path: Path,
) -> None:
    """Ray's workers are children of the node's raylet, not of the monitor: they are found by
    the job step environment they inherit (job id and node name)."""

    def orphan(node: str) -> int:  # its shell exits at once: not a child of this process
        env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURMD_NODENAME": node}
        shell = "sleep 60 >/dev/null 2>&1 & echo $!"
        return int(subprocess.run(["sh", "-c", shell], env=env, capture_output=True).stdout)

    here, elsewhere = orphan("nodeA"), orphan("nodeB")
    try:
        members = CpuSource(("4242", "nodeA")).members()
        assert here in members and os.getpid() in members
        assert elsewhere not in members  # the same job's process on another node
        assert here not in CpuSource().members()  # outside a job: this process tree only
    finally:
        for pid in (here, elsewhere):
            os.kill(pid, signal.SIGKILL)


def test_a_stopped_run_left_by_an_earlier_attempt_is_not_followed(tmp_path: Path) -> None:
    phase_file = RunDir(tmp_path).phase_file
    phase_file.write_text('{"phase": "generate:math", "t0": 0, "stopped": true, "host": "n1"}')
    worker = Monitor(
        RunDir(tmp_path).node_metrics("n2"),
        interval_s=0.02,
        nvml=FakeNvml([FakeGpu(uuid=fake_uuid(0))]),
        visible_devices="0",
        follow_phase=phase_file,
    ).start()
    time.sleep(0.1)
    assert not worker.leader_stopped.is_set()
    assert dicts(worker.stop())[0]["samples"] == 0


def test_publishing_and_following_at_once_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not both"):
        Monitor(tmp_path / "m.csv", publish_phase=tmp_path / "a", follow_phase=tmp_path / "b")


def test_monitor_command_follows_a_run_and_exits_when_it_stops(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "evalpipe", "monitor", "--follow", str(tmp_path)]
    proc = subprocess.Popen(
        [*cmd, "--interval", "0.05", "--host", "worker1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        leader = Monitor(
            tmp_path / "metrics.csv",
            interval_s=HOUR,
            nvml=FakeNvml([FakeGpu(uuid=fake_uuid(0))]),
            visible_devices="0",
            publish_phase=RunDir(tmp_path).phase_file,
        )
        with leader:
            leader.set_phase("load")
            time.sleep(1.5)  # the follower starts (imports) and records a few rows
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    # This machine has no NVIDIA driver: the follower records its own process as "cpu".
    (summary,) = json.loads(out)
    assert (summary["host"], summary["device"]) == ("worker1", "cpu")
    got = rows(RunDir(tmp_path).node_metrics("worker1"))
    assert summary["samples"] == len(got) > 0
    assert {r["phase"] for r in got} == {"load"}


def test_monitor_command_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "evalpipe", "monitor", "--follow", str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert json.loads(out)[0]["samples"] == 0  # no run to follow: nothing recorded


@pytest.mark.parametrize(
    ("errors", "used"),
    [
        ({}, "10"),  # the v2 query: what nvidia-smi shows
        ({"memory_v2": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND}, "10.5"),  # an old driver: v1
    ],
)
def test_memory_used_leaves_out_the_drivers_reservation_where_it_can(
    tmp_path: Path, errors: dict[str, int], used: str
) -> None:
    gpu = FakeGpu(
        uuid=fake_uuid(0),
        memory_used_bytes=(10 * GIB,),
        memory_reserved_bytes=GIB // 2,
        errors=errors,
    )
    with Monitor(tmp_path / "m.csv", interval_s=HOUR, nvml=FakeNvml([gpu]), visible_devices="0"):
        pass
    assert [r["memory_used_gib"] for r in rows(tmp_path / "m.csv")] == [used, used]
