"""Merge the shard run directories of an array job (RUN_DIR/shards/<i>/) into RUN_DIR.

Shards must agree on everything but their slice; the merged configuration is the unsharded
one (same config_hash), so the merged directory reads, and resumes, as an unsharded run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.core import provenance
from evalpipe.core.errors import RunDirError
from evalpipe.core.isolation import weakest
from evalpipe.run.kindfiles import write_merged_results
from evalpipe.rundir.aggregation import combine_devices
from evalpipe.rundir.layout import MANIFEST, SHARDS, RunDir
from evalpipe.rundir.lock import RunLock
from evalpipe.rundir.manifest import (
    Manifest,
    PlannedTask,
    RunStatus,
    ShardStatus,
    read_manifest,
    write_manifest,
)
from evalpipe.rundir.samplelog import (
    SampleRecord,
    check_unique,
    read_samples,
    write_samples,
)
from evalpipe.rundir.submission import read_plan
from evalpipe.rundir.summary import Summary, summarize_run, write_summary


@dataclass(frozen=True, kw_only=True)
class ShardRun:
    index: int
    count: int
    path: Path
    manifest: Manifest
    records: list[SampleRecord]

    @property
    def n_total(self) -> int:
        return self.manifest.n_total

    @property
    def complete(self) -> bool:
        return self.manifest.status == "complete" and len(self.records) == self.n_total


@dataclass(frozen=True, kw_only=True)
class MergeResult:
    complete: bool
    missing: list[str]  # why the merge is incomplete, one line per shard
    summary: Summary


def _read_shard(path: Path) -> ShardRun:
    files = RunDir(path)
    manifest = read_manifest(files)
    if manifest is None:
        raise RunDirError(f"{files.manifest} does not exist.")
    shard = manifest.config.shard_of()
    if shard is None or str(shard.index) != path.name:
        raise RunDirError(
            f"{path} is not shard {path.name}: its manifest says shard "
            f"{manifest.config.shard!r}. Each array task i must run with --shard i/N "
            f"--out RUN_DIR/{SHARDS}/i."
        )
    records = read_samples(files.samples).require_intact()
    check_unique(records, files.samples)
    stray = [r for r in records if r.shard != shard.index]
    if stray:
        raise RunDirError(
            f"{files.samples} holds sample {stray[0].sample_id!r} of shard {stray[0].shard}, "
            f"not {shard.index}: shard directories were mixed up."
        )
    return ShardRun(
        index=shard.index, count=shard.count, path=path, manifest=manifest, records=records
    )


def _check_consistent(shards: Sequence[ShardRun]) -> None:
    first = shards[0]
    base = first.manifest.config.unsharded()
    for shard in shards[1:]:
        if shard.count != first.count:
            raise RunDirError(
                f"Shards disagree on the shard count: {first.path} is one of {first.count}, "
                f"{shard.path} one of {shard.count}."
            )
        other = shard.manifest.config.unsharded()
        if other.fingerprint() != base.fingerprint():
            raise RunDirError(
                f"{shard.path} ran with a different configuration than {first.path}:\n  "
                + "\n  ".join(base.diff(other))
            )
    seen: dict[tuple[str, str], int] = {}
    for shard in shards:
        for record in shard.records:
            if record.key in seen:
                raise RunDirError(
                    f"Sample {record.sample_id!r} of task {record.task!r} is in shard "
                    f"{seen[record.key]} and shard {shard.index}; shards must not overlap."
                )
            seen[record.key] = shard.index


def _interleave(shards: Sequence[ShardRun], tasks: Sequence[str]) -> list[SampleRecord]:
    """Records grouped by task in the run's task order, the shards' lines interleaved (each
    shard's in the order its samples finished)."""
    merged: list[SampleRecord] = []
    for task in tasks:
        lanes = [[r for r in s.records if r.task == task] for s in shards]
        for j in range(max((len(lane) for lane in lanes), default=0)):
            merged.extend(lane[j] for lane in lanes if j < len(lane))
    return merged


def _merged_manifest(run_dir: Path, shards: Sequence[ShardRun], status: RunStatus) -> Manifest:
    first = shards[0].manifest
    config = first.config.unsharded()
    totals: dict[str, PlannedTask] = {}
    for shard in shards:
        for p in shard.manifest.samples_planned:
            before = totals.get(p.name)
            n_total = p.n_total + (before.n_total if before else 0)
            totals[p.name] = dataclasses.replace(p, n_total=n_total)
    timings: dict[str, float] = {}
    for shard in shards:
        for phase, seconds in shard.manifest.timings.items():
            timings[phase] = timings.get(phase, 0.0) + seconds
    hosts = [h for s in shards for h in s.manifest.hosts]
    return dataclasses.replace(
        first,
        run_id=run_dir.name,
        status=status,
        plan=read_plan(RunDir(run_dir)) or first.plan,
        config=config,
        config_hash=config.fingerprint(),
        hosts=list(dict.fromkeys(hosts)),
        slurm=provenance.slurm_ids(),
        timings=timings,
        oom_fallback=[
            f"shard {s.index}: {step}" for s in shards for step in s.manifest.oom_fallback
        ],
        started_at=min(s.manifest.started_at for s in shards),
        finished_at=provenance.utc_now(),
        samples_planned=[totals[t] for t in config.tasks],
        attempts=[
            dataclasses.replace(a, shard=s.index) for s in shards for a in s.manifest.attempts
        ],
        devices=combine_devices([(s.manifest.devices, s.manifest.wall_s) for s in shards]),
        sandbox=weakest(s.manifest.sandbox for s in shards),
        error=None,
        shards=[
            ShardStatus(
                index=s.index,
                status=s.manifest.status,
                n_done=len(s.records),
                n_total=s.n_total,
                hosts=s.manifest.hosts,
                slurm=s.manifest.slurm,
            )
            for s in shards
        ],
    )


def merge_run(run_dir: Path, *, allow_incomplete: bool = False) -> MergeResult:
    """Write RUN_DIR/{samples.jsonl,manifest.json,summary.json} from RUN_DIR/shards/*/, and
    the results file of each task kind whose shards kept one, when all are complete.

    Inconsistent shards are always refused; missing or unfinished ones unless
    `allow_incomplete`, in which case the merged run is marked incomplete. The run directory is
    held (evalpipe.rundir.lock) while it is written: a run or another merge there is refused.
    """
    if not RunDir(run_dir).shards.is_dir():
        raise RunDirError(f"{RunDir(run_dir).shards} holds no shard directories to merge.")
    with RunLock(run_dir):
        return _merge(run_dir, allow_incomplete)


def _merge(run_dir: Path, allow_incomplete: bool) -> MergeResult:
    shards_dir = RunDir(run_dir).shards
    dirs = sorted(
        (p for p in shards_dir.iterdir() if p.is_dir()) if shards_dir.is_dir() else [],
        key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name),
    )
    if not dirs:
        raise RunDirError(f"{shards_dir} holds no shard directories to merge.")
    previous = read_manifest(RunDir(run_dir))
    if previous is not None:
        continued = any(a.shard is None for a in previous.attempts)
        if previous.shards is None or continued:
            raise RunDirError(
                f"{run_dir} holds samples of an unsharded run ({MANIFEST} lists attempts not "
                "made by a shard); merging again would overwrite them."
            )
    missing: list[str] = []
    shards: list[ShardRun] = []
    for path in dirs:
        if not RunDir(path).manifest.exists():
            missing.append(f"shard {path.name}: never started ({RunDir(path).manifest} is absent)")
            continue
        shards.append(_read_shard(path))
    if not shards:
        raise RunDirError(f"None of the shards in {shards_dir} has started: " + "; ".join(missing))
    _check_consistent(shards)
    present = {s.index for s in shards}
    missing.extend(
        f"shard {i}: no directory {shards_dir / str(i)}"
        for i in range(shards[0].count)
        if i not in present and not (shards_dir / str(i)).exists()
    )
    missing.extend(
        f"shard {s.index}: {len(s.records)}/{s.n_total} samples, status {s.manifest.status}"
        for s in shards
        if not s.complete
    )
    if missing and not allow_incomplete:
        raise RunDirError(
            f"Cannot merge {run_dir}: some shards are not finished:\n  "
            + "\n  ".join(missing)
            + "\nRerun (or requeue) those shards, or pass --allow-incomplete to merge what exists."
        )
    complete = not missing
    manifest = _merged_manifest(run_dir, shards, "complete" if complete else "interrupted")
    records = _interleave(shards, manifest.config.tasks)
    write_samples(RunDir(run_dir).samples, records)
    # A shard that never started has an unknown sample count, so n_done == n_total can mislead.
    summary = summarize_run(records, manifest, complete=complete)
    write_manifest(RunDir(run_dir), manifest)
    write_summary(RunDir(run_dir), summary)
    if complete:
        write_merged_results(RunDir(run_dir), [RunDir(s.path) for s in shards], records)
    return MergeResult(complete=complete, missing=missing, summary=summary)
