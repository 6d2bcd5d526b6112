"""`evalpipe merge`: the shards of an array job add up to the unsharded run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from runner_support import fake_engine, lines, preset, toy_tasks

from evalpipe.cli import main as cli
from evalpipe.core import exitcodes
from evalpipe.core.errors import RunDirError
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.shardmerge import merge_run
from evalpipe.rundir.samplelog import read_json
from evalpipe.rundir.shard import Shard


def run_shard(run_dir: Path, i: int, n: int, **options) -> Path:
    out = run_dir / "shards" / str(i)
    opts = RunOptions(backend="fake", window=2, shard=Shard(index=i, count=n), **options)
    run_evaluation(lambda settings: fake_engine(), toy_tasks(), out, preset=preset(), options=opts)
    return out


def test_merged_run_equals_the_unsharded_run(tmp_path: Path, reference: Path, capsys) -> None:
    run_dir = tmp_path / "job"
    for i in range(3):
        run_shard(run_dir, i, 3)
    assert cli(["merge", str(run_dir)]) == 0
    assert "(micro)" in capsys.readouterr().out
    got, want = read_json(run_dir / "summary.json"), read_json(reference / "summary.json")
    for key in ("tasks", "categories", "n_done", "n_total", "complete"):
        assert got[key] == want[key], key
    # Same lines in the same order; each keeps the shard that produced it.
    merged = lines(run_dir)
    assert [{**r, "shard": None} for r in merged] == lines(reference)
    assert merged[1]["shard"] == 1
    manifest = read_json(run_dir / "manifest.json")
    assert manifest["status"] == "complete"
    assert manifest["config"]["shard"] is None
    assert manifest["config_hash"] == read_json(reference / "manifest.json")["config_hash"]
    assert [s["n_done"] for s in manifest["shards"]] == [8, 6, 6]
    assert len(manifest["attempts"]) == 3


def test_missing_or_unfinished_shards_are_refused_unless_allowed(
    tmp_path: Path, reference: Path, capsys
) -> None:
    run_dir = tmp_path / "job"
    run_shard(run_dir, 0, 3)
    run_shard(run_dir, 2, 3)
    with pytest.raises(RunDirError, match=r"shard 1: no directory") as err:
        merge_run(run_dir)
    assert "--allow-incomplete" in str(err.value)
    assert cli(["merge", str(run_dir)]) == exitcodes.ERROR
    assert "shard 1: no directory" in capsys.readouterr().err

    result = merge_run(run_dir, allow_incomplete=True)
    assert not result.complete and not result.summary.complete
    assert read_json(run_dir / "manifest.json")["status"] == "interrupted"
    assert result.summary.n_done == 8 + 6

    # The merged directory is an unsharded run: running into it fills the gap.
    opts = RunOptions(backend="fake", window=2)
    engine = fake_engine()
    done = run_evaluation(
        lambda settings: engine, toy_tasks(), run_dir, preset=preset(), options=opts
    )
    assert len(engine.served) == 6
    assert done.status == "complete"
    assert done.summary.to_dict()["tasks"] == read_json(reference / "summary.json")["tasks"]
    with pytest.raises(RunDirError, match="merging again would overwrite"):
        merge_run(run_dir, allow_incomplete=True)


def test_unfinished_shard_is_named(tmp_path: Path) -> None:
    run_dir = tmp_path / "job"
    run_shard(run_dir, 0, 2)
    shard1 = run_shard(run_dir, 1, 2)
    kept = (shard1 / "samples.jsonl").read_text().splitlines(keepends=True)[:3]
    (shard1 / "samples.jsonl").write_text("".join(kept))
    with pytest.raises(RunDirError, match=r"shard 1: 3/9 samples"):
        merge_run(run_dir)


def test_inconsistent_shards_are_refused_even_when_incomplete_is_allowed(tmp_path: Path) -> None:
    run_dir = tmp_path / "job"
    run_shard(run_dir, 0, 2)
    run_shard(run_dir, 1, 2, limit=3)
    with pytest.raises(RunDirError, match=r"different configuration[\s\S]*limit: null → 3"):
        merge_run(run_dir, allow_incomplete=True)

    counts = tmp_path / "counts"
    run_shard(counts, 0, 2)
    shutil.copytree(run_shard(tmp_path / "other", 1, 3), counts / "shards" / "1")
    with pytest.raises(RunDirError, match="disagree on the shard count"):
        merge_run(counts, allow_incomplete=True)


def test_overlapping_shards_are_refused(tmp_path: Path) -> None:
    run_dir = tmp_path / "job"
    s0 = run_shard(run_dir, 0, 2)
    s1 = run_shard(run_dir, 1, 2)
    stolen = {**lines(s0)[0], "shard": 1}
    with open(s1 / "samples.jsonl", "a") as fh:
        fh.write(json.dumps(stolen) + "\n")
    with pytest.raises(RunDirError, match="must not overlap"):
        merge_run(run_dir, allow_incomplete=True)


def test_an_unsharded_run_is_never_overwritten(tmp_path: Path, reference: Path) -> None:
    run_dir = tmp_path / "job"
    shutil.copytree(reference, run_dir)
    run_shard(run_dir, 0, 1)
    with pytest.raises(RunDirError, match="samples of an unsharded run"):
        merge_run(run_dir)
    with pytest.raises(RunDirError, match="no shard directories"):
        merge_run(tmp_path / "empty")
