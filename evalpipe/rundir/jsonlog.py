"""Append-only JSONL logs of small records beside samples.jsonl (per-turn answers, judgments).

Each append is flushed and fsynced before it returns: these records are few (one per turn or
judgment) and each stands for a paid-for generation. A line cut short by a kill is dropped
before the next append (`JsonlLog` opens after `trim`), and readers skip it meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from evalpipe.core.errors import RunDirError
from evalpipe.rundir.samplelog import storage

T = TypeVar("T")


def trim(path: Path) -> None:
    """Cut a last line that has no newline (a write cut short by a kill): its record is redone."""
    if not path.exists():
        return
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return
    with storage(path), open(path, "r+b") as fh:
        fh.truncate(data.rfind(b"\n") + 1)
        fh.flush()
        os.fsync(fh.fileno())


class JsonlLog:
    """One JSONL file for durable appends, created on the first (a run with nothing to log
    leaves no file); use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO | None = None

    def append(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            trim(self.path)
            with storage(self.path):
                self._fh = open(self.path, "ab")  # noqa: SIM115 (closed by close())
        payload = b"".join(
            (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode() for row in rows
        )
        with storage(self.path):
            self._fh.write(payload)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_jsonl(path: Path, parse: Callable[[dict[str, Any]], T]) -> list[T]:
    """Every whole record of a JSONL log in file order; a missing file holds none. Only the last
    line may be cut short (skipped); any other bad line is a RunDirError naming it."""
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RunDirError(f"Cannot read {str(path)!r}: {exc.strerror}.") from exc
    tail = lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(parse(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise RunDirError(
                f"{path}, line {number}, is not a whole record ({exc}); the file was edited. "
                "Remove that line to redo its record."
            ) from None
    if tail.strip():
        # Cut short by a kill when it is no whole record: trim() drops it before the next append.
        with contextlib.suppress(ValueError, KeyError, TypeError):
            out.append(parse(json.loads(tail)))
    return out
