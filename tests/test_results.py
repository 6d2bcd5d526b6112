"""The sample log survives crashes: a cut-short last line is repaired, never duplicated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.core.errors import RunDirError
from evalpipe.rundir.results import (
    SampleRecord,
    append_samples,
    check_unique,
    read_json,
    read_samples,
    repair_samples,
    write_json,
)


def record(i: int, task: str = "t") -> SampleRecord:
    return SampleRecord(
        task=task,
        category="c",
        sample_id=f"s{i}",
        prompt=[{"role": "user", "content": f"question {i} ünïcode"}],
        completions=(f"answer {i}",),
        extracted=(str(i),),
        scores={"accuracy": float(i % 2)},
        prompt_tokens=3,
        completion_tokens=(2,),
        shard=None,
    )


def test_append_and_read_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0), record(1)])
    append_samples(path, [record(2)])
    assert read_samples(path) == [record(0), record(1), record(2)]
    line = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert set(line) == {
        "task", "category", "sample_id", "prompt", "completions", "extracted", "scores",
        "prompt_tokens", "completion_tokens", "shard",
    }  # fmt: skip


def test_cut_short_last_line_is_dropped_then_appends_stay_clean(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0), record(1)])
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"task": "t", "category": "c", "sample_id": "s2", "pro')
    assert read_samples(path) == [record(0), record(1)]  # reading alone never modifies
    repair_samples(path)
    assert path.read_bytes() == whole
    append_samples(path, [record(2)])
    assert read_samples(path) == [record(0), record(1), record(2)]


def test_whole_record_missing_only_its_newline_is_kept_once(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0), record(1)])
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    repair_samples(path)
    append_samples(path, [record(2)])
    assert read_samples(path) == [record(0), record(1), record(2)]


def test_cut_inside_multibyte_character_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0), record(1)])
    data = path.read_bytes()
    cut = data.rindex("ü".encode()) + 1  # half of a two-byte character
    path.write_bytes(data[:cut])
    repair_samples(path)
    assert read_samples(path) == [record(0)]


def test_damaged_middle_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0)])
    path.write_bytes(path.read_bytes() + b"garbage\n")
    append_samples(path, [record(1)])
    with pytest.raises(RunDirError, match="line 2"):
        read_samples(path)


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="more than once"):
        check_unique([record(0), record(1), record(0)], tmp_path / "samples.jsonl")
    check_unique([record(0), record(0, task="other")], tmp_path / "samples.jsonl")


def test_json_documents_are_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_json(path, {"status": "running"})
    write_json(path, {"status": "complete"})
    assert read_json(path) == {"status": "complete"}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temp files left
    path.write_text("{not json")
    with pytest.raises(RunDirError, match="cannot be read as JSON"):
        read_json(path)
