"""Sweeps: several presets into one folder, and sweep.json, the folder's record.

Local sweeps are pure orchestration over `run_one(preset, run_dir) -> exit status`: each preset
gets its own run directory under the sweep folder, a preset that fails is recorded and the sweep
goes on, and sweep.json remembers what finished so that rerunning the command skips it.
`evalpipe submit` writes the same record for a submitted sweep (with each preset's job id), and
`evalpipe status` reads it for both.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, EvalpipeError, RunDirError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_json, write_json

SWEEP_MANIFEST = "sweep.json"
SCHEMA = 1
RunOne = Callable[[str, Path], int]
ERROR_CHARS = 300  # the closing list cuts each error here; sweep.json and the log keep it whole
SweepStatus = Literal["running", "complete", "interrupted", "failed"]


@dataclass(kw_only=True)
class SweepRun:
    """One preset of a sweep: its run directory (relative to the sweep folder) and, for a
    submitted sweep, its job; for a local one, how its last try ended."""

    preset: str
    run_dir: str
    job_id: str | None = None
    status: SweepStatus | None = None
    exit_status: int | None = None
    error: str | None = None
    rss_mib_after: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(kw_only=True)
class SweepManifest:
    """sweep.json: the presets of a sweep folder, in order."""

    runs: list[SweepRun] = field(default_factory=list)
    rss_mib_before: float | None = None

    @property
    def presets(self) -> list[str]:
        return [r.preset for r in self.runs]

    def entry(self, preset: str) -> SweepRun:
        """The preset's record, added with its default run directory when new."""
        for run in self.runs:
            if run.preset == preset:
                return run
        self.runs.append(SweepRun(preset=preset, run_dir=run_name(preset)))
        return self.runs[-1]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"schema": SCHEMA, "runs": [r.to_dict() for r in self.runs]}
        if self.rss_mib_before is not None:
            data["rss_mib_before"] = self.rss_mib_before
        return data

    @classmethod
    def from_dict(cls, data: Any, *, where: Path) -> SweepManifest:
        runs = data.get("runs") if isinstance(data, dict) else None
        if isinstance(runs, dict):  # local sweeps before the record was shared: preset → run
            runs = [{"preset": p, **r} for p, r in runs.items() if isinstance(r, dict)]
        known = {f.name for f in dataclasses.fields(SweepRun)}
        if not isinstance(runs, list) or not all(
            isinstance(r, dict) and {"preset", "run_dir"} <= r.keys() for r in runs
        ):
            raise RunDirError(
                f"{where} lists no runs; it was not written by `evalpipe run` or `evalpipe "
                "submit`. Point at the sweep folder itself, or use a new folder."
            )
        return cls(
            runs=[SweepRun(**{k: v for k, v in r.items() if k in known}) for r in runs],
            rss_mib_before=data.get("rss_mib_before"),
        )


def read_sweep(folder: Path) -> SweepManifest | None:
    """FOLDER/sweep.json, or None when FOLDER is not a sweep folder."""
    path = folder / SWEEP_MANIFEST
    return SweepManifest.from_dict(read_json(path), where=path) if path.is_file() else None


def write_sweep(folder: Path, manifest: SweepManifest) -> None:
    write_json(folder / SWEEP_MANIFEST, manifest.to_dict())


def preset_list(values: Sequence[str]) -> list[str]:
    """`--preset a,b --preset c` → [a, b, c], each once, in order."""
    names = [n.strip() for value in values for n in value.split(",")]
    if any(not n for n in names):
        raise ConfigError(
            f"--preset {','.join(values)!r} has an empty name; give names separated by commas."
        )
    return list(dict.fromkeys(names))


def run_name(preset: str) -> str:
    """The run directory's name for a preset name or a path to a preset YAML."""
    return Path(preset).stem if preset.endswith((".yaml", ".yml")) else preset


def default_folder(presets: Sequence[str]) -> Path:
    """The same presets give the same folder, so rerunning the command resumes the sweep."""
    return Path("results") / ("sweep-" + "+".join(run_name(p) for p in presets))


def rss_mib() -> float | None:
    """This process's resident memory (Linux /proc) once garbage is collected; None elsewhere.

    A closed engine's objects can sit in reference cycles until the next collection.
    """
    gc.collect()
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def run_sweep(
    presets: Sequence[str],
    folder: Path,
    run_one: RunOne,
    *,
    leaderboard: Callable[[Path], object],
    memory: Callable[[], float | None] = rss_mib,
    log: TextIO | None = None,
) -> int:
    """Run each unfinished preset in turn; 0 when every one completed, 75 when stopped."""
    log = log or sys.stderr
    folder.mkdir(parents=True, exist_ok=True)
    manifest = read_sweep(folder) or SweepManifest()
    entries = [manifest.entry(p) for p in presets]
    manifest.rss_mib_before = memory()
    status = exitcodes.OK
    for entry in entries:
        if entry.status == "complete":
            print(f"evalpipe run: sweep: {entry.preset} already complete, skipped", file=log)
            continue
        print(
            f"evalpipe run: sweep: {entry.preset} → {folder / entry.run_dir}", file=log, flush=True
        )
        entry.status, entry.error = "running", None
        write_sweep(folder, manifest)
        try:
            code = run_one(entry.preset, folder / entry.run_dir)
        except EvalpipeError as exc:
            code, entry.error = exitcodes.ERROR, str(exc)
            print(f"evalpipe run: sweep: {entry.preset} failed: {exc}", file=log)
        entry.exit_status = code
        entry.status = {exitcodes.OK: "complete", exitcodes.RESUMABLE: "interrupted"}.get(
            code, "failed"
        )
        entry.rss_mib_after = memory()
        write_sweep(folder, manifest)
        if code == exitcodes.RESUMABLE:
            return exitcodes.RESUMABLE  # a stop signal: end the sweep; rerunning resumes here
        if code != exitcodes.OK:
            status = exitcodes.ERROR
    _report(folder, entries, leaderboard, log)
    return status


def _report(
    folder: Path,
    entries: Sequence[SweepRun],
    leaderboard: Callable[[Path], object],
    log: TextIO,
) -> None:
    failed = [e for e in entries if e.status != "complete"]
    if any(RunDir(folder / e.run_dir).manifest.is_file() for e in entries):
        leaderboard(folder)
    done = len(entries) - len(failed)
    print(f"\nSweep folder: {folder} ({done}/{len(entries)} presets complete)")
    for entry in failed:
        error = entry.error or f"exit status {entry.exit_status}"
        error = error if len(error) <= ERROR_CHARS else error[: ERROR_CHARS - 1] + "…"
        print(f"evalpipe run: sweep: {entry.preset} did not complete: {error}", file=log)
    if failed:
        print(
            "evalpipe run: sweep: rerun the same command to retry the unfinished presets "
            "(finished ones are skipped).",
            file=log,
        )
