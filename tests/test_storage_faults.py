"""Storage faults: a full or read-only file system gives one message and exit 74, nothing is
half-written, and a resume completes; damaged lines in the middle are moved aside and redone."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runner_support import fake_engine, lines, preset, toy_tasks

from evalpipe.core import exitcodes
from evalpipe.core.errors import StorageError
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import storage

REPO = Path(__file__).resolve().parents[1]
ARGV = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic",
        "--limit", "300", "--monitor-interval", "3600"]  # fmt: skip


def by_id(records: list[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r["sample_id"])


def evalpipe(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "evalpipe", *ARGV, "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("code", "meaning"),
    [
        (errno.ENOSPC, "the file system is full"),
        (errno.EDQUOT, "the disk quota is exhausted"),
        (errno.EIO, "the storage reported an I/O error"),
        (errno.EROFS, "the file system is read-only"),
        (errno.ENOENT, "the run directory was removed"),
    ],
)
def test_each_storage_failure_becomes_one_message(code: int, meaning: str) -> None:
    with pytest.raises(StorageError) as caught, storage(Path("/x/samples.jsonl")):
        raise OSError(code, os.strerror(code))
    text = str(caught.value)
    assert text.startswith(f"Cannot write /x/samples.jsonl: {meaning}")
    assert "rerun the same command to resume" in text
    assert caught.value.exit_status == exitcodes.STORAGE == 74
    with pytest.raises(PermissionError), storage(Path("/x")):  # not a storage fault: as it is
        raise PermissionError(errno.EACCES, "denied")


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 40 KiB tmpfs, less than a whole run's samples (root only; CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    done = evalpipe(out)
    assert done.returncode == 0, done.stderr
    return out


def test_a_full_disk_stops_with_one_message_and_the_run_resumes(
    small_fs: Path, uninterrupted: Path
) -> None:
    out = small_fs / "run"
    done = evalpipe(out)
    assert done.returncode == exitcodes.STORAGE, done.stderr
    assert "error: Cannot write" in done.stderr and "the file system is full" in done.stderr
    assert "Traceback" not in done.stderr
    written = (RunDir(out).samples).read_bytes()
    assert 0 < written.count(b"\n") < 200  # the disk filled while samples were written
    json.loads(RunDir(out).manifest.read_text())  # still whole: replaced atomically or kept
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
    again = evalpipe(out)
    assert again.returncode == 0, again.stderr
    assert by_id(lines(out)) == by_id(lines(uninterrupted))


def test_a_read_only_file_system_stops_the_resume_until_it_is_writable(
    small_fs: Path, uninterrupted: Path
) -> None:
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_fs)], check=True)
    out = small_fs / "run"
    out.mkdir()
    for name in ("manifest.json", "samples.jsonl"):
        shutil.copy(uninterrupted / name, out)
    kept = RunDir(out).samples.read_text().splitlines(keepends=True)[:100]
    RunDir(out).samples.write_text("".join(kept))
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    done = evalpipe(out)
    assert done.returncode == exitcodes.STORAGE, done.stderr
    assert "the file system is read-only" in done.stderr and "Traceback" not in done.stderr
    subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    again = evalpipe(out)
    assert again.returncode == 0, again.stderr
    assert by_id(lines(out)) == by_id(lines(uninterrupted))


def test_damaged_lines_in_the_middle_are_moved_aside_and_redone(tmp_path: Path, caplog) -> None:
    reference, out = tmp_path / "reference", tmp_path / "run"
    options = RunOptions(backend="fake")
    run_evaluation(
        lambda s: fake_engine(), toy_tasks(), reference, preset=preset(), options=options
    )
    shutil.copytree(reference, out)
    text = RunDir(out).samples.read_text().splitlines(keepends=True)
    text[4] = text[4][:30] + "\x00\x00garbage\n"  # a torn write, not at the end
    text[9] = "{}\n"
    RunDir(out).samples.write_text("".join(text))
    engine = fake_engine()
    result = run_evaluation(lambda s: engine, toy_tasks(), out, preset=preset(), options=options)
    assert result.status == "complete" and len(engine.served) == 2
    assert "2 damaged line(s)" in caplog.text
    assert len(RunDir(out).damaged.read_text().splitlines()) == 2
    assert by_id(lines(out)) == by_id(lines(reference))
    assert result.summary.n_done == 20
