"""Run-directory files: the per-sample record, the durable JSONL log, atomic JSON documents.

samples.jsonl is the checkpoint: a sample counts as done once its line is on disk. Lines are
appended, flushed and fsynced; a line cut short by a crash is repaired (dropped, or completed
when the JSON is whole) before anything is appended after it, so nothing is ever duplicated.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.core.configio import first_repeat
from evalpipe.core.errors import DamagedFileError, RunDirError, StorageError
from evalpipe.records.prompt import Prompt
from evalpipe.records.refusal import Refusal
from evalpipe.records.tools import ToolCalls


@dataclass(frozen=True, kw_only=True)
class SampleRecord:
    """One finished sample, as one line of samples.jsonl. Its key is (task, sample_id)."""

    task: str
    category: str
    sample_id: str
    prompt: Prompt
    completions: tuple[str, ...]
    extracted: tuple[str | None, ...]
    scores: dict[str, float]
    prompt_tokens: int
    completion_tokens: tuple[int, ...]
    shard: int | None = None
    option_logprobs: tuple[float, ...] = ()  # multiple choice by logprobs: one per option
    # Reasoning models, one entry per completion (empty otherwise; older files have none): the
    # reasoning kept apart from the scored answer, its token count, and whether the completion
    # ended inside its reasoning (unanswered).
    reasoning: tuple[str | None, ...] = ()
    reasoning_tokens: tuple[int, ...] = ()
    cut_off: tuple[bool, ...] = ()
    # Multi-turn samples: the answer to each turn in order (the last one is `completions[0]`).
    turns: tuple[str, ...] = ()
    # Why the engine did not answer (a prompt longer than its context, …); None: it answered.
    # A refused sample is finished: its scores are 0 and resume does not ask it again.
    refusal: Refusal | None = None
    # Requests with tools, one entry per completion (absent otherwise and in older files): the
    # calls parsed from it, and why a call it began did not parse.
    tool_calls: tuple[ToolCalls, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.task, self.sample_id)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "task": self.task,
            "category": self.category,
            "sample_id": self.sample_id,
            "prompt": self.prompt,
            "completions": list(self.completions),
            "extracted": list(self.extracted),
            "scores": dict(self.scores),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": list(self.completion_tokens),
            "shard": self.shard,
        } | {
            key: list(value)
            for key, value in (
                ("option_logprobs", self.option_logprobs),
                ("reasoning", self.reasoning),
                ("reasoning_tokens", self.reasoning_tokens),
                ("cut_off", self.cut_off),
                ("turns", self.turns),
            )
            if value
        }
        if self.refusal is not None:
            data["refusal"] = self.refusal.to_dict()
        if self.tool_calls:
            data["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> SampleRecord:
        """Raises ValueError when `data` is not a complete record."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        get = data.get
        # Written for speed (map(), walrus, no work for absent fields): this runs once per line
        # of every log a report reads.
        try:
            return cls(
                task=str(data["task"]),
                category=str(data["category"]),
                sample_id=str(data["sample_id"]),
                prompt=data["prompt"],
                completions=tuple(data["completions"]),
                extracted=tuple(data["extracted"]),
                scores={str(k): float(v) for k, v in data["scores"].items()},
                prompt_tokens=int(data["prompt_tokens"]),
                completion_tokens=tuple(map(int, data["completion_tokens"])),
                shard=None if (shard := get("shard")) is None else int(shard),
                option_logprobs=tuple(map(float, x)) if (x := get("option_logprobs")) else (),
                reasoning=tuple(None if r is None else str(r) for r in x)
                if (x := get("reasoning"))
                else (),
                reasoning_tokens=tuple(map(int, x)) if (x := get("reasoning_tokens")) else (),
                cut_off=tuple(map(bool, x)) if (x := get("cut_off")) else (),
                turns=tuple(map(str, x)) if (x := get("turns")) else (),
                refusal=Refusal.from_dict(x) if (x := get("refusal")) else None,
                tool_calls=tuple(map(ToolCalls.from_dict, x)) if (x := get("tool_calls")) else (),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a sample record ({exc!r})") from exc


def unparsed_tool_calls(records: Sequence[SampleRecord]) -> int:
    """How many completions of `records` began a tool call that did not parse."""
    return sum(bool(c.unparsed) for r in records for c in r.tool_calls)


def refusal_counts(records: Sequence[SampleRecord]) -> dict[str, int]:
    """How many of `records` the engine refused, by reason (none refused: empty)."""
    counts = Counter(r.refusal.reason for r in records if r.refusal is not None)
    return dict(sorted(counts.items()))


def _encode(record: SampleRecord) -> bytes:
    return (json.dumps(record.to_dict(), ensure_ascii=False, allow_nan=False) + "\n").encode()


# File-system failures that no retry fixes, and what each means to a user.
STORAGE_ERRNOS = {
    errno.ENOSPC: "the file system is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EIO: "the storage reported an I/O error",
    errno.EROFS: "the file system is read-only",
    errno.ENOENT: "the run directory was removed",
    errno.ESTALE: "the network file system lost the file (stale handle)",
}


@contextlib.contextmanager
def storage(path: Path) -> Iterator[None]:
    """Turn a file-system failure while writing `path` into one StorageError that says what
    failed, what is safe, and how to resume."""
    try:
        yield
    except OSError as exc:
        meaning = STORAGE_ERRNOS.get(exc.errno or 0)
        if meaning is None:
            raise
        raise StorageError(
            f"Cannot write {path}: {meaning} ({errno.errorcode.get(exc.errno or 0, exc.errno)}). "
            "The samples already in samples.jsonl are safe (a line cut short is repaired on "
            "resume). Free space or fix the file system, then rerun the same command to resume."
        ) from None


# samples.jsonl durability: every record is written to the OS as soon as it is scored (a killed
# process loses only requests in flight) and fsynced in groups, every FSYNC_SAMPLES records or
# FSYNC_SECONDS, whichever first (a node that crashes loses at most that window).
FSYNC_SAMPLES = 64
FSYNC_SECONDS = 1.0


class SampleLog:
    """samples.jsonl opened for appending, with group fsync. Use as a context manager."""

    def __init__(
        self,
        path: Path,
        *,
        fsync_samples: int = FSYNC_SAMPLES,
        fsync_seconds: float = FSYNC_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._fsync_samples = fsync_samples
        self._fsync_seconds = fsync_seconds
        self._clock = clock
        with storage(path):
            self._fh = open(path, "ab")  # noqa: SIM115 (closed by close())
        self._unsynced = 0
        self._synced_at = clock()

    def append(self, records: Sequence[SampleRecord]) -> None:
        """Write records to the OS at once; fsync when the group is full or old enough."""
        if not records:
            return
        with storage(self.path):
            self._fh.write(b"".join(_encode(r) for r in records))
            self._fh.flush()
        self._unsynced += len(records)
        if (
            self._unsynced >= self._fsync_samples
            or self._clock() - self._synced_at >= self._fsync_seconds
        ):
            self.sync()

    def sync(self) -> None:
        if self._unsynced:
            with storage(self.path):
                os.fsync(self._fh.fileno())
            self._unsynced = 0
        self._synced_at = self._clock()

    def close(self) -> None:
        if not self._fh.closed:
            try:
                self.sync()
            finally:
                with contextlib.suppress(OSError):  # the failure was reported by sync()
                    self._fh.close()

    def __enter__(self) -> SampleLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _record(line: bytes) -> SampleRecord | None:
    """The one validity rule of samples.jsonl: a line counts when it is a whole record."""
    try:
        return SampleRecord.from_dict(json.loads(line))
    except ValueError:  # includes JSONDecodeError and UnicodeDecodeError
        return None


@dataclass(frozen=True, kw_only=True)
class SampleFile:
    """What a samples.jsonl holds: its whole records in file order, and where it is damaged.

    Blank lines are skipped. An unterminated last line is a write cut short by a crash: it
    counts when it is a whole record, else it is `cut_short` (the normal trace of a kill). Any
    other line that is not a whole record is `damaged` (a torn write on NFS, a bad block, an
    edit): readers skip it, resume moves it aside and runs its sample again.
    """

    path: Path
    records: list[SampleRecord]
    damaged: tuple[int, ...] = ()  # line numbers, from 1
    cut_short: int | None = None  # the number of a cut-short last line

    def require_intact(self) -> list[SampleRecord]:
        """The records, or RunDirError when a line other than a cut-short last one is damaged
        (for merge, which must not silently drop samples)."""
        if self.damaged:
            raise RunDirError(
                f"{self.path}, line {self.damaged[0]}, is not a sample record. Only the last "
                "line can be cut short by a crash; rerun `evalpipe run` with the same options "
                "to move damaged lines aside and run their samples again."
            )
        return self.records

    def warnings(self) -> list[str]:
        """One line per kind of damage, for readers that report and go on."""
        out = []
        if self.cut_short is not None:
            out.append(
                f"{self.path}: last line {self.cut_short} is truncated (the run was killed or is "
                "still writing); ignored it."
            )
        if self.damaged:
            shown = ", ".join(map(str, self.damaged[:10])) + (
                " …" if len(self.damaged) > 10 else ""
            )
            out.append(
                f"{self.path}: {len(self.damaged)} line(s) are not sample records ({shown}); "
                "ignored them."
            )
        return out


def read_samples(path: Path) -> SampleFile:
    """Read a samples file without modifying it (see SampleFile); a missing file holds no
    records, one that cannot be read is a RunDirError naming it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return SampleFile(path=path, records=[])
    except OSError as exc:
        raise RunDirError(f"Cannot read {str(path)!r}: {exc.strerror}.") from exc
    with _gc_paused():
        return _parse(path, data)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing makes a few objects per line and no reference cycles: the collector's passes
    over them are pure cost (about a third of a report's reading time over 400,000 lines)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _parse(path: Path, data: bytes) -> SampleFile:
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip()]
    records = _read_fast([line for _, line in numbered])
    damaged: list[int] = []
    if records is None:
        records = []
        for number, line in numbered:
            record = _record(line)
            if record is None:
                damaged.append(number)
            else:
                records.append(record)
    cut_short = None
    if tail.strip():
        last = _record(tail)
        if last is None:
            cut_short = len(lines) + 1
        else:
            records.append(last)
    return SampleFile(path=path, records=records, damaged=tuple(damaged), cut_short=cut_short)


def _read_fast(lines: list[bytes]) -> list[SampleRecord] | None:
    """Every line as a record in one parse of the whole file as a JSON array (one call into the
    C scanner instead of one per line); None when any line is not a record."""
    try:
        values = json.loads(b"[" + b",".join(lines) + b"]")
        if len(values) != len(lines):
            return None
        return [SampleRecord.from_dict(value) for value in values]
    except ValueError:
        return None


class SampleTail:
    """Follows a samples file another process appends to: each `read` returns the whole records
    of the lines completed since the last (a line still being written waits for its newline).
    A file rewritten or cut shorter (a resume's repair) is read again from its start, so a
    reader keys what it has seen rather than counting on each record coming once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._inode: int | None = None

    def read(self) -> list[SampleRecord]:
        try:
            with open(self.path, "rb") as fh:
                stat = os.fstat(fh.fileno())
                if stat.st_ino != self._inode or stat.st_size < self._offset:
                    self._inode, self._offset = stat.st_ino, 0
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RunDirError(f"Cannot read {str(self.path)!r}: {exc.strerror}.") from exc
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        records = (_record(line) for line in complete.split(b"\n") if line.strip())
        return [r for r in records if r is not None]


def repair_samples(path: Path) -> None:
    """Make the file end on a record boundary so appends never join a cut-short line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        if _record(data[cut:]) is not None:
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")  # the record was whole, only its newline was lost
        else:
            fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())


def salvage_samples(path: Path, aside: Path) -> int:
    """Move the damaged lines (SampleFile.damaged) of a samples file into `aside`; how many moved.

    A damaged line would stop every merge; moved aside, its sample simply runs again. A last
    line cut short by a crash is left for repair_samples."""
    found = read_samples(path)
    if not found.damaged:
        return 0
    lines = path.read_bytes().split(b"\n")
    tail = lines.pop()
    bad = set(found.damaged)
    with storage(aside), open(aside, "ab") as fh:
        fh.write(b"".join(lines[n - 1] + b"\n" for n in found.damaged))
        fh.flush()
        os.fsync(fh.fileno())
    kept = [line for n, line in enumerate(lines, 1) if n not in bad and line.strip()]
    _replace(path, b"".join(line + b"\n" for line in kept) + tail)
    return len(bad)


def check_unique(records: list[SampleRecord], where: Path) -> None:
    """Refuse a log that holds a sample twice: resume and merge rely on keys being unique."""
    key = first_repeat(record.key for record in records)
    if key is not None:
        task, sample_id = key
        raise RunDirError(
            f"{where} holds sample {sample_id!r} of task {task!r} more than once; the file was "
            "edited or written by two runs at the same time."
        )


def _replace(path: Path, payload: bytes) -> None:
    """Write a file atomically: readers see the old or the new content, never a mix."""
    with storage(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(payload)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def write_text(path: Path, text: str) -> None:
    """Replace a text file atomically (a cluster profile `site detect` writes)."""
    _replace(path, text.encode())


def write_json(path: Path, data: Any) -> None:
    """Replace a JSON document (manifest, summary) atomically."""
    _replace(
        path, (json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()
    )


def write_samples(path: Path, records: list[SampleRecord]) -> None:
    """Replace a samples file atomically (merge output)."""
    _replace(path, b"".join(_encode(r) for r in records))


def read_json(path: Path) -> dict[str, Any]:
    """A run-directory JSON document: RunDirError naming it when it is missing or cannot be read,
    DamagedFileError when it is not a JSON object."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise RunDirError(f"{path} does not exist.") from exc
    except OSError as exc:
        raise RunDirError(f"Cannot read {str(path)!r}: {exc.strerror}.") from exc
    except ValueError as exc:
        raise DamagedFileError(f"{path} cannot be read as JSON ({exc}).") from exc
    if not isinstance(data, dict):
        raise DamagedFileError(f"{path} must hold a JSON object, not {type(data).__name__}.")
    return data
