"""`evalpipe run` command-line handling that needs no task registry."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.rundir.samplelog import read_json

REPO = Path(__file__).resolve().parents[1]


def test_resume_needs_an_existing_run(tmp_path: Path, capsys) -> None:
    assert main(["run", "--preset", "tiny_random", "--backend", "fake", "--resume"]) == 1
    assert "--resume needs --out" in capsys.readouterr().err
    code = main(["run", "--preset", "tiny_random", "--resume", "--out", str(tmp_path / "nope")])
    assert code == exitcodes.ERROR
    assert "there is no run to resume" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard", "2/2"], "index in 0..count-1"),
        (["--shard", "half"], "must look like i/N"),
        (["--limit", "0"], "expected a positive integer"),
        (["--backend", "tgi"], "invalid choice"),
    ],
)
def test_bad_options_are_usage_errors(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--preset", "tiny_random", *argv])
    assert exit_.value.code == exitcodes.USAGE
    assert message in capsys.readouterr().err


def test_help_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys\n"
        "from evalpipe.cli import main\n"
        "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'vllm', 'torch', 'pandas', 'pynvml', 'psutil'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def run_cli(*argv: str) -> int:
    return main(["run", "--preset", "tiny_random", "--backend", "fake", *argv])


def test_fake_backend_end_to_end_with_the_shipped_tasks(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert run_cli("--categories", "math,reasoning", "--limit", "3", "--out", str(out)) == 0
    printed = capsys.readouterr().out
    assert "arithmetic" in printed and "(micro)" in printed and f"Run directory: {out}" in printed
    summary = read_json(out / "summary.json")
    assert summary["complete"] and summary["n_done"] == summary["n_total"] > 0
    assert set(summary["categories"]) == {"math", "reasoning"}
    assert [d["device"] for d in summary["devices"]] == ["cpu"]  # no NVML here
    assert (out / "metrics.csv").read_text().startswith("time_s,host,device,phase")
    manifest = read_json(out / "manifest.json")
    assert manifest["config"]["categories"] == ["math", "reasoning"]

    # Rerunning resumes: nothing left, so nothing new happens and the summary stands.
    assert (
        run_cli("--categories", "math,reasoning", "--limit", "3", "--out", str(out), "--resume")
        == 0
    )
    assert read_json(out / "summary.json")["tasks"] == summary["tasks"]
    assert len(read_json(out / "manifest.json")["attempts"]) == 1

    code = run_cli("--categories", "math,reasoning", "--limit", "4", "--out", str(out))
    assert code == exitcodes.ERROR
    err = capsys.readouterr().err
    assert "different configuration" in err and "limit: 3 → 4" in err


def test_a_run_in_a_multi_node_job_publishes_its_phase_for_the_other_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever runs the model (vLLM over Ray, or a server the job started), a run in a job of
    several nodes publishes the phase file the other nodes' monitors follow."""
    from evalpipe.rundir.layout import RunDir

    alone, spread = tmp_path / "alone", tmp_path / "spread"
    assert run_cli("--tasks", "arithmetic", "--limit", "1", "--out", str(alone)) == 0
    assert not RunDir(alone).phase_file.exists()
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert run_cli("--tasks", "arithmetic", "--limit", "1", "--out", str(spread)) == 0
    assert read_json(RunDir(spread).phase_file)["stopped"] is True


def test_sigusr1_through_the_command_line_exits_resumable(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", "tiny_random", "--backend",
            "fake", "--tasks", "arithmetic", "--limit", "6", "--window", "1",
            "--out", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "EVALPIPE_FAKE_DELAY_S": "0.3"}
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + 60
    while not (samples.exists() and samples.read_text().count("\n") >= 1):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == exitcodes.RESUMABLE, stderr
    assert "INCOMPLETE" in stdout
    assert "to resume" in stderr and "--out" in stderr
    assert read_json(out / "manifest.json")["status"] == "interrupted"
    env.pop("EVALPIPE_FAKE_DELAY_S")
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == exitcodes.OK, done.stderr
    assert read_json(out / "summary.json")["n_done"] == 6


def test_a_dataset_missing_offline_fails_before_the_run_directory_exists(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    out = tmp_path / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "gsm8k"]
    assert main([*argv, "--out", str(out)]) == exitcodes.ERROR
    assert "gsm8k" in capsys.readouterr().err
    assert not out.exists()


def test_deterministic_mode_is_recorded_and_part_of_the_fingerprint(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic",
            "--limit", "4", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--deterministic"]) == exitcodes.OK
    manifest = read_json(out / "manifest.json")
    assert manifest["config"]["deterministic"] is True
    assert manifest["config"]["engine"]["deterministic"] is True
    capsys.readouterr()
    assert main(argv) == exitcodes.ERROR  # the same directory without the mode is another run
    assert 'deterministic: true → "(absent)"' in capsys.readouterr().err
    code = main([*argv[:-1], str(tmp_path / "two"), "--deterministic", "--replicas", "2"])
    assert code == exitcodes.ERROR
    assert "--deterministic runs one engine, not 2 replicas" in capsys.readouterr().err
