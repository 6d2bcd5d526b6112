"""A pilot inside the run directory: what the manifest records of it, and the pilot's samples
handed to the shards of the full run that follows (so no shard generates them again)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.core.errors import RunDirError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.rundir.pilotrecord import PilotRecord, PilotTask
from evalpipe.rundir.runconfig import RunConfig
from evalpipe.rundir.samplelog import SampleRecord, read_samples
from evalpipe.tasks.base import Sample, Task


def pilot_record(
    size: str, seed: int, drawn: Sequence[tuple[Task, list[Sample]]], populations: Sequence[int]
) -> PilotRecord:
    """The manifest's `pilot`: the size as given, the seed, and per task the samples drawn of
    the samples the full run owes."""
    return PilotRecord(
        size=size,
        seed=seed,
        tasks={
            task.name: PilotTask(ids=tuple(s.id for s in samples), of=population)
            for (task, samples), population in zip(drawn, populations, strict=True)
        },
    )


def shard_seed(
    out_dir: Path, config: RunConfig, planned_keys: set[tuple[str, str]]
) -> list[SampleRecord]:
    """For a new shard directory of a run that began as a pilot: the pilot's samples in this
    shard's slice, which the shard resumes instead of generating. None where the directory is
    no shard, or its run held no pilot of this configuration."""
    files = RunDir(out_dir)
    if not files.is_shard:
        return []
    parent = RunDir(out_dir.parent.parent)
    try:
        manifest = read_manifest(parent)
        if manifest is None or manifest.pilot is None:
            return []
        if manifest.config_hash != config.unsharded().fingerprint():
            return []  # another configuration: its samples are not this shard's
        return [r for r in read_samples(parent.samples).records if r.key in planned_keys]
    except RunDirError:  # no readable pilot there: the shard generates its whole slice
        return []


def pilot_samples(records: Sequence[SampleRecord], pilot: PilotRecord) -> int:
    """How many of `records` are the pilot's drawn samples."""
    drawn = pilot.keys
    return sum(r.key in drawn for r in records)
