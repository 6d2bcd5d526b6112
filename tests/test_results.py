"""The sample log survives crashes: a cut-short last line is repaired, never duplicated; one
reader with one rule says which lines are records, which are damaged, which were cut short."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import append_samples

from evalpipe.core.errors import RunDirError
from evalpipe.rundir.samplelog import (
    SampleRecord,
    check_unique,
    read_json,
    read_samples,
    repair_samples,
    salvage_samples,
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
    assert read_samples(path).records == [record(0), record(1), record(2)]
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
    assert read_samples(path).records == [record(0), record(1)]  # reading alone never modifies
    repair_samples(path)
    assert path.read_bytes() == whole
    append_samples(path, [record(2)])
    assert read_samples(path).records == [record(0), record(1), record(2)]


def test_whole_record_missing_only_its_newline_is_kept_once(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0), record(1)])
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    repair_samples(path)
    append_samples(path, [record(2)])
    assert read_samples(path).records == [record(0), record(1), record(2)]


def test_cut_inside_multibyte_character_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0), record(1)])
    data = path.read_bytes()
    cut = data.rindex("ü".encode()) + 1  # half of a two-byte character
    path.write_bytes(data[:cut])
    repair_samples(path)
    assert read_samples(path).records == [record(0)]


def test_damaged_lines_are_skipped_and_named_and_merge_refuses_them(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    append_samples(path, [record(0)])
    incomplete = {k: v for k, v in record(9).to_dict().items() if k != "completions"}
    path.write_bytes(path.read_bytes() + b"garbage\n" + json.dumps(incomplete).encode() + b"\n")
    append_samples(path, [record(1)])
    path.write_bytes(path.read_bytes() + b'{"task": "t", "sampl')
    found = read_samples(path)
    assert found.records == [record(0), record(1)]
    assert (found.damaged, found.cut_short) == ((2, 3), 5)
    assert found.warnings() == [
        f"{path}: last line 5 is truncated (the run was killed or is still writing); ignored it.",
        f"{path}: 2 line(s) are not sample records (2, 3); ignored them.",
    ]
    with pytest.raises(RunDirError, match="line 2, is not a sample record"):
        found.require_intact()


def test_resume_moves_exactly_the_damaged_lines_aside(tmp_path: Path) -> None:
    path, aside = tmp_path / "samples.jsonl", tmp_path / "samples.damaged.jsonl"
    append_samples(path, [record(0)])
    path.write_bytes(path.read_bytes() + b"garbage\n\n")
    append_samples(path, [record(1)])
    assert salvage_samples(path, aside) == 1
    assert aside.read_bytes() == b"garbage\n"
    found = read_samples(path)
    assert found.records == [record(0), record(1)] and found.damaged == ()


def test_a_missing_log_holds_nothing_and_an_unreadable_one_is_an_error(tmp_path: Path) -> None:
    assert read_samples(tmp_path / "samples.jsonl").records == []
    (tmp_path / "samples.jsonl").mkdir()
    with pytest.raises(RunDirError, match=r"Cannot read .*samples\.jsonl.*Is a directory"):
        read_samples(tmp_path / "samples.jsonl")


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
