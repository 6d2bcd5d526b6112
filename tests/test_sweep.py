"""Sweeps: `evalpipe run --preset a,b,c` runs each preset into its own run directory, survives a
preset that fails, prints one leaderboard and resumes preset by preset."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, EngineError, RunDirError
from evalpipe.rundir.samplelog import read_json, write_json
from evalpipe.rundir.sweep import SWEEP_MANIFEST, default_folder, preset_list, read_sweep, run_sweep

REPO = Path(__file__).resolve().parents[1]
SMOLLM2_WEIGHTS_MIB = 135e6 * 2 / 2**20
FAKE = ["--backend", "fake", "--tasks", "ordering", "--limit", "2"]


def by_preset(folder: Path) -> dict[str, dict]:
    return {r["preset"]: r for r in read_json(folder / SWEEP_MANIFEST)["runs"]}


def test_preset_lists_and_the_default_folder() -> None:
    assert preset_list(["a,b", "c", "a"]) == ["a", "b", "c"]
    with pytest.raises(ConfigError, match="empty name"):
        preset_list(["a,,b"])
    assert default_folder(["tiny_random", "cfg/x.yaml"]) == Path("results/sweep-tiny_random+x")


def test_fake_engine_sweep_survives_a_failing_preset_and_resumes(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "sweep"
    argv = ["run", "--preset", "tiny_random,no_such_preset", "--preset", "smollm2_135m", *FAKE]
    assert main([*argv, "--out", str(folder)]) == exitcodes.ERROR
    out = capsys.readouterr()
    runs = by_preset(folder)
    assert {p: r["status"] for p, r in runs.items()} == {
        "tiny_random": "complete",
        "no_such_preset": "failed",
        "smollm2_135m": "complete",
    }
    assert "Unknown preset 'no_such_preset'" in runs["no_such_preset"]["error"]
    assert "no_such_preset did not complete" in out.err
    # One leaderboard over both finished presets, and `evalpipe report` over the sweep folder.
    board = out.out[out.out.index("## Leaderboard") :]
    assert "| tiny_random |" in board and "| smollm2_135m |" in board
    assert main(["report", str(folder), "--format", "json"]) == exitcodes.OK
    reported = json.loads(capsys.readouterr().out)["runs"]
    assert {r["preset"] for r in reported} == {"tiny_random", "smollm2_135m"}

    attempts = len(read_json(folder / "tiny_random" / "manifest.json")["attempts"])
    assert main([*argv, "--out", str(folder)]) == exitcodes.ERROR  # the failure is still there
    err = capsys.readouterr().err
    assert "tiny_random already complete, skipped" in err
    assert "smollm2_135m already complete, skipped" in err
    assert len(read_json(folder / "tiny_random" / "manifest.json")["attempts"]) == attempts


def test_an_interrupted_preset_stops_the_sweep_and_is_resumed_next_time(tmp_path: Path) -> None:
    calls: list[tuple[str, Path]] = []
    boards: list[Path] = []

    def run_one(preset: str, out: Path) -> int:
        calls.append((preset, out))
        if preset == "b" and len(calls) == 2:
            return exitcodes.RESUMABLE  # a stop signal mid-preset
        if preset == "c":
            raise EngineError("Out of memory (build) for preset c after every fallback step")
        (out.mkdir(parents=True, exist_ok=True), (out / "manifest.json").write_text("{}"))
        return exitcodes.OK

    log = io.StringIO()
    sweep = tmp_path / "s"
    assert run_sweep(["a", "b", "c"], sweep, run_one, leaderboard=boards.append, log=log) == 75
    assert [p for p, _ in calls] == ["a", "b"] and boards == []
    assert by_preset(sweep)["b"]["status"] == "interrupted"
    assert run_sweep(["a", "b", "c"], sweep, run_one, leaderboard=boards.append, log=log) == 1
    assert [p for p, _ in calls] == ["a", "b", "b", "c"]  # a skipped, b resumed, c failed
    assert calls[1][1] == calls[2][1] == sweep / "b"  # the same run directory: the runner resumes
    assert boards == [sweep]
    runs = by_preset(sweep)
    assert runs["c"]["status"] == "failed" and "Out of memory" in runs["c"]["error"]
    assert all(isinstance(r["rss_mib_after"], float) for r in runs.values())


def test_shard_and_resume_take_one_preset(capsys) -> None:
    assert main(["run", "--preset", "a,b", "--resume", *FAKE]) == exitcodes.ERROR
    assert "a sweep resumes by rerunning the same command" in capsys.readouterr().err


@pytest.mark.vllm
def test_real_engine_sweep_releases_each_model(tmp_path: Path, vllm_env, tiny_random_path) -> None:
    from evalpipe.catalog import weights

    weights.prepare("smollm2_135m")
    again = tmp_path / "smollm2_again.yaml"  # SmolLM2 once more, under another name
    shutil.copy(REPO / "configs" / "presets" / "smollm2_135m.yaml", again)
    folder = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, "-m", "evalpipe", "run", "--preset", f"smollm2_135m,tiny_random,{again}",
         "--backend", "vllm", "--tasks", "ordering", "--limit", "2", "--out", str(folder)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| tiny_random |" in done.stdout and "| smollm2_135m |" in done.stdout
    sweep = read_json(folder / SWEEP_MANIFEST)
    first, _, last = (r["rss_mib_after"] for r in sweep["runs"])
    # The same model twice, with the engine core in this process
    # (VLLM_ENABLE_V1_MULTIPROCESSING=0): had the first engine not been released, the second
    # would add its weights (about 260 MiB in bf16) and KV cache on top. Freed memory stays with
    # the allocator (RSS does not fall back), but it is reused.
    assert last - first < SMOLLM2_WEIGHTS_MIB, sweep


def test_local_and_submitted_sweeps_share_one_record(tmp_path: Path, capsys) -> None:
    """sweep.json has one shape whoever wrote it; a local sweep's older preset → run mapping
    still loads, and `evalpipe status` names a damaged record."""
    local = tmp_path / "local"
    run_sweep(["a", "b"], local, lambda p, out: exitcodes.OK, leaderboard=lambda f: None)
    assert [(r.preset, r.run_dir, r.status) for r in read_sweep(local).runs] == [
        ("a", "a", "complete"),
        ("b", "b", "complete"),
    ]
    older = tmp_path / "older"
    older.mkdir()
    write_json(older / SWEEP_MANIFEST, {"schema": 1, "presets": ["a"], "runs": {"a": {
        "run_dir": "a", "status": "failed", "error": "boom"}}})  # fmt: skip
    assert [(r.preset, r.status, r.error) for r in read_sweep(older).runs] == [
        ("a", "failed", "boom")
    ]
    calls: list[str] = []
    run_sweep(["a"], older, lambda p, out: calls.append(p) or 0, leaderboard=lambda f: None)
    assert calls == ["a"] and by_preset(older)["a"]["status"] == "complete"
    write_json(older / SWEEP_MANIFEST, {"schema": 1, "runs": "?"})
    with pytest.raises(RunDirError, match=r"sweep\.json lists no runs"):
        read_sweep(older)
