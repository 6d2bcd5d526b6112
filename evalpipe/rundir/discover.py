"""Find run directories under the paths a user names, without counting shards as runs."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from evalpipe.core.errors import RunDirError
from evalpipe.rundir.layout import RUN_FILES, SHARDS, RunDir


def is_run_dir(folder: Path) -> bool:
    """A folder with run files of its own, or a sharded run whose shards hold them."""
    run = RunDir(folder)
    return run.has_run_files() or bool(run.shard_dirs())


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every run directory at or below each path, sorted, each once.

    A run directory's own subfolders (shards/, logs/) are not searched: shards belong to their
    run and are merged by the loader.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise RunDirError(
                f"{str(path)!r} does not exist: give a run directory or a folder of them."
            )
        if not path.is_dir():
            raise RunDirError(
                f"{str(path)!r} is not a directory: give a run directory (with manifest.json, "
                "summary.json or samples.jsonl) or a folder of them such as results/."
            )
        runs = list(_walk(path))
        if not runs:
            raise RunDirError(
                f"No run directories under {str(path)!r}: looked for folders holding "
                f"{', '.join(RUN_FILES)} or {SHARDS}/<i>/."
            )
        for run in runs:
            found.setdefault(run.resolve(), None)
    return sorted(found)


def _walk(folder: Path) -> Iterable[Path]:
    if is_run_dir(folder):
        yield folder
        return
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise RunDirError(f"Cannot read {str(folder)!r}: {exc.strerror}.") from exc
    for entry in entries:
        if entry.is_dir() and not entry.name.startswith("."):
            yield from _walk(Path(entry.path))
