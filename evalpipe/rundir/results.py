"""Run-directory files: the per-sample record, the durable JSONL log, atomic JSON documents.

samples.jsonl is the checkpoint: a sample counts as done once its line is on disk. Lines are
appended, flushed and fsynced; a line cut short by a crash is repaired (dropped, or completed
when the JSON is whole) before anything is appended after it, so nothing is ever duplicated.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalpipe.core.configio import first_repeat
from evalpipe.core.errors import RunDirError, StorageError
from evalpipe.engine.base import Prompt


def new_run_dir(results: Path, name: str) -> Path:
    """results/<name>-<UTC yyyymmdd-HHMMSS>-<4 hex>: how `evalpipe run` and `submit` name runs."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return results / f"{name}-{stamp}-{secrets.token_hex(2)}"


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

    @property
    def key(self) -> tuple[str, str]:
        return (self.task, self.sample_id)

    def to_dict(self) -> dict[str, Any]:
        return {
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
            )
            if value
        }

    @classmethod
    def from_dict(cls, data: Any) -> SampleRecord:
        """Raises ValueError when `data` is not a complete record."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
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
                completion_tokens=tuple(int(n) for n in data["completion_tokens"]),
                shard=None if data.get("shard") is None else int(data["shard"]),
                option_logprobs=tuple(float(x) for x in data.get("option_logprobs") or ()),
                reasoning=tuple(None if x is None else str(x) for x in data.get("reasoning") or ()),
                reasoning_tokens=tuple(int(n) for n in data.get("reasoning_tokens") or ()),
                cut_off=tuple(bool(x) for x in data.get("cut_off") or ()),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a sample record ({exc!r})") from exc


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


def append_samples(path: Path, records: Sequence[SampleRecord]) -> None:
    """Append records as lines and make them durable before returning."""
    with SampleLog(path, fsync_samples=1) as log:
        log.append(records)


def _parse_tail(tail: bytes) -> SampleRecord | None:
    try:
        return SampleRecord.from_dict(json.loads(tail))
    except ValueError:  # includes JSONDecodeError and UnicodeDecodeError
        return None


def read_samples(path: Path) -> list[SampleRecord]:
    """The records in a samples file, in file order, without modifying it.

    An unterminated last line is a write cut short: it counts only if it is a whole record.
    A bad line anywhere else means the file was damaged otherwise, and is an error.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(SampleRecord.from_dict(json.loads(line)))
        except ValueError as exc:
            raise RunDirError(
                f"{path}, line {number}, is not a sample record ({exc}). Only the last line can be "
                "cut short by a crash; rerun `evalpipe run` with the same options to move "
                "damaged lines aside and run their samples again."
            ) from exc
    if tail.strip():
        last = _parse_tail(tail)
        if last is not None:
            records.append(last)
    return records


def repair_samples(path: Path) -> None:
    """Make the file end on a record boundary so appends never join a cut-short line."""
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with open(path, "r+b") as fh:
        if _parse_tail(data[cut:]) is not None:
            fh.seek(0, os.SEEK_END)
            fh.write(b"\n")  # the record was whole, only its newline was lost
        else:
            fh.truncate(cut)
        fh.flush()
        os.fsync(fh.fileno())


def salvage_samples(path: Path, aside: Path) -> int:
    """Move damaged lines out of the middle of a samples file into `aside`; how many moved.

    A line that is not a whole record anywhere but at the end (a torn write on NFS, a bad
    block) would stop every resume; moved aside, its sample simply runs again. A last line cut
    short by a crash is left for repair_samples."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()
    good, bad = [], []
    for line in lines:
        if not line.strip():
            continue
        (good if _parse_tail(line) is not None else bad).append(line)
    if not bad:
        return 0
    with storage(aside), open(aside, "ab") as fh:
        fh.write(b"".join(line + b"\n" for line in bad))
        fh.flush()
        os.fsync(fh.fileno())
    _replace(path, b"".join(line + b"\n" for line in good) + tail)
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
    """A run-directory JSON document; a missing or damaged file is a RunDirError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RunDirError(f"{path} does not exist.") from exc
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path} cannot be read as JSON ({exc}).") from exc
    if not isinstance(data, dict):
        raise RunDirError(f"{path} must hold a JSON object, not {type(data).__name__}.")
    return data
