"""manifest.json as typed records: the run's identity, configuration, attempts and timings.

`Manifest` is the only code that knows the document's keys. The run that holds a directory
(evalpipe.rundir.layout) builds and updates one; merge builds one from the shards' manifests;
reports read them. Keys a newer evalpipe added are kept as they were (`extra`), so a rewrite never
drops them; an older manifest lacking optional keys reads with their defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from evalpipe.core.errors import DamagedFileError
from evalpipe.monitor.devicesummary import DeviceSummary
from evalpipe.planning.helperplacement import PlacementKind
from evalpipe.planning.planner import Plan
from evalpipe.rundir.layout import SCHEMA, RunDir
from evalpipe.rundir.occupancy import Occupancy
from evalpipe.rundir.pilotrecord import PilotRecord
from evalpipe.rundir.runconfig import RunConfig
from evalpipe.rundir.samplelog import read_json, write_json
from evalpipe.rundir.timings import Timings

RunStatus = Literal["running", "complete", "interrupted", "failed"]
# An attempt found still `running` by the next one was killed without a word: `lost`.
AttemptStatus = Literal["running", "complete", "interrupted", "failed", "lost"]


@dataclass(kw_only=True)
class Attempt:
    """One process that worked on the run directory."""

    started_at: str
    finished_at: str | None = None
    status: AttemptStatus = "running"
    host: str = ""
    slurm: dict[str, Any] | None = None  # job and array ids; None outside SLURM
    git_sha: str | None = None
    wall_s: float = 0.0
    shard: int | None = None  # in a merged manifest: the shard the attempt worked on

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "status": self.status,
            "host": self.host,
            "slurm": self.slurm,
            "git_sha": self.git_sha,
            "wall_s": self.wall_s,
        }
        return out | ({"shard": self.shard} if self.shard is not None else {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        return cls(
            started_at=str(data.get("started_at") or ""),
            finished_at=data.get("finished_at"),
            status=_status(data.get("status"), AttemptStatus, "attempt status"),
            host=str(data.get("host") or ""),
            slurm=data.get("slurm"),
            git_sha=data.get("git_sha"),
            wall_s=float(data.get("wall_s") or 0.0),
            shard=data.get("shard"),
        )


@dataclass(frozen=True, kw_only=True)
class PlannedTask:
    """A task as the run planned it: its category and how many samples this run owes."""

    name: str
    category: str
    n_total: int

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.name, "category": self.category, "n_total": self.n_total}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlannedTask:
        return cls(name=data["task"], category=data["category"], n_total=int(data["n_total"]))


@dataclass(frozen=True, kw_only=True)
class ShardStatus:
    """In a merged manifest: where one shard stood when it was merged."""

    index: int
    status: RunStatus
    n_done: int
    n_total: int
    hosts: list[str] = field(default_factory=list)
    slurm: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "status": self.status,
            "n_done": self.n_done,
            "n_total": self.n_total,
            "hosts": self.hosts,
            "slurm": self.slurm,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardStatus:
        return cls(
            index=int(data["index"]),
            status=_status(data["status"], RunStatus, "shard status"),
            n_done=int(data["n_done"]),
            n_total=int(data["n_total"]),
            hosts=list(data.get("hosts") or []),
            slurm=data.get("slurm"),
        )


@dataclass(frozen=True, kw_only=True)
class TrackedRun:
    """The experiment tracker's run that mirrors this one (W&B or MLflow): a resumed attempt
    continues it. Its address and keys stay in the environment, never here."""

    backend: str
    run_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "run_id": self.run_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrackedRun:
        return cls(backend=str(data["backend"]), run_id=str(data["run_id"]))


@dataclass(frozen=True, kw_only=True)
class UserSimulator:
    """The model that played the user of an agent run's episodes, as the latest attempt used
    it: a preset's, or an endpoint's (its base URL; the key's variable and the key never here),
    where it ran (planning/usersimplacement.py: same-engine, side-by-side or server) and the
    sampling of its turns (SamplingSettings.to_dict())."""

    model: str
    placement: PlacementKind
    preset: str | None = None
    base_url: str | None = None
    sampling: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        served = {"preset": self.preset, "base_url": self.base_url}
        return (
            {"model": self.model, "placement": self.placement}
            | {k: v for k, v in served.items() if v is not None}
            | {"sampling": dict(self.sampling)}
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UserSimulator:
        return cls(
            model=str(data["model"]),
            placement=_status(data["placement"], PlacementKind, "user_sim placement"),
            preset=None if data.get("preset") is None else str(data["preset"]),
            base_url=None if data.get("base_url") is None else str(data["base_url"]),
            sampling=dict(data.get("sampling") or {}),
        )


_KEYS = (
    "schema", "run_id", "status", "preset", "plan", "config", "config_hash", "versions",
    "git_sha", "hosts", "slurm", "seed", "timings", "oom_fallback", "started_at",
    "finished_at", "samples_planned", "engine", "devices", "attempts", "error", "shards",
    "tracking", "occupancy", "admission", "sandbox", "user_sim", "pilot",
)  # fmt: skip


@dataclass(kw_only=True)
class Manifest:
    """The run's record; mutable, because the one process that holds the run updates it."""

    run_id: str
    status: RunStatus
    config: RunConfig
    config_hash: str
    started_at: str
    samples_planned: list[PlannedTask]
    preset: dict[str, Any] | None = None  # the resolved preset of the latest attempt
    plan: Plan | None = None  # `evalpipe submit`'s plan.json
    versions: dict[str, Any] = field(default_factory=dict)
    git_sha: str | None = None
    hosts: list[str] = field(default_factory=list)
    slurm: dict[str, Any] | None = None
    seed: int | None = None
    timings: dict[str, float] = field(default_factory=dict)
    oom_fallback: list[str] = field(default_factory=list)
    finished_at: str | None = None
    engine: dict[str, Any] | None = None  # the engine's own description (every replica's)
    # Per-device summaries from the monitor, carried over from earlier attempts.
    devices: list[DeviceSummary] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    error: str | None = None
    shards: list[ShardStatus] | None = None  # a merged run: each shard's status
    tracking: TrackedRun | None = None  # set by the runner once the tracker has a run
    # How full the engine's batch was while generating, over every attempt.
    occupancy: Occupancy = field(default_factory=Occupancy)
    # The latest attempt's admission order: policy, prediction sources (evalpipe.run.admission).
    admission: dict[str, Any] | None = None
    # The code sandbox's isolation level ("full" or "weak", docs/sandbox.md) where the latest
    # attempt scored code; None where it scored none.
    sandbox: str | None = None
    # An agent run's user simulator (None: the run has none).
    user_sim: UserSimulator | None = None
    # Where the run began as a pilot (`--pilot`): its size, seed, and per task the samples
    # drawn of how many; a full run resuming it adds how many it resumed.
    pilot: PilotRecord | None = None
    schema: int = SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know

    @property
    def preset_name(self) -> str:
        return str((self.preset or {}).get("name") or self.config.preset)

    @property
    def model(self) -> str:
        """The model's id, as the resolved preset (else the configuration) names it."""
        return str((self.preset or {}).get("model") or self.config.model.get("model") or "")

    @property
    def engine_device(self) -> str | None:
        """Where the engine said it ran (its description's `device`); None if it did not say."""
        device = (self.engine or {}).get("device")
        return None if device is None else str(device)

    @property
    def phase_timings(self) -> Timings:
        return Timings(self.timings)

    @property
    def wall_s(self) -> float:
        """Seconds the run's processes ran, over all attempts (and shards, once merged)."""
        return math.fsum(a.wall_s for a in self.attempts)

    @property
    def n_total(self) -> int:
        return sum(p.n_total for p in self.samples_planned)

    def add_time(self, phase: str, seconds: float) -> None:
        self.timings[phase] = round(self.timings.get(phase, 0.0) + seconds, 6)

    def begin(self, attempt: Attempt) -> None:
        """A new attempt starts; one still `running` died without a word (kill -9)."""
        for previous in self.attempts:
            if previous.status == "running":
                previous.status = "lost"
        self.attempts.append(attempt)
        self.status = "running"
        self.finished_at = None
        self.slurm = attempt.slurm
        self.git_sha = attempt.git_sha
        if attempt.host not in self.hosts:
            self.hosts.append(attempt.host)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": self.schema,
            "run_id": self.run_id,
            "status": self.status,
            "preset": self.preset,
            "plan": None if self.plan is None else self.plan.to_dict(),
            "config": self.config.to_dict(),
            "config_hash": self.config_hash,
            "versions": self.versions,
            "git_sha": self.git_sha,
            "hosts": self.hosts,
            "slurm": self.slurm,
            "seed": self.seed,
            "timings": self.timings,
            "oom_fallback": self.oom_fallback,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "samples_planned": [p.to_dict() for p in self.samples_planned],
            "engine": self.engine,
            "devices": [d.to_dict() for d in self.devices],
            "attempts": [a.to_dict() for a in self.attempts],
        }
        if self.error is not None:
            out["error"] = self.error
        if self.shards is not None:
            out["shards"] = [s.to_dict() for s in self.shards]
        if self.tracking is not None:
            out["tracking"] = self.tracking.to_dict()
        if self.occupancy.tail_share is not None:
            out["occupancy"] = self.occupancy.to_dict()
        if self.admission is not None:
            out["admission"] = self.admission
        if self.sandbox is not None:
            out["sandbox"] = self.sandbox
        if self.user_sim is not None:
            out["user_sim"] = self.user_sim.to_dict()
        if self.pilot is not None:
            out["pilot"] = self.pilot.to_dict()
        return self.extra | out

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "manifest.json") -> Manifest:
        """A manifest of this schema or an older one; RunDirError naming `where` otherwise."""
        if not isinstance(data, dict):
            raise DamagedFileError(f"{where} must hold a JSON object, not {type(data).__name__}.")
        schema = data.get("schema")
        if not isinstance(schema, int) or schema > SCHEMA:
            raise DamagedFileError(
                f"{where} has schema {schema!r}; this evalpipe reads schema {SCHEMA} and older. "
                "Upgrade evalpipe to read it."
            )
        try:
            return cls(
                schema=schema,
                run_id=str(data["run_id"]),
                status=_status(data["status"], RunStatus, "status"),
                config=RunConfig.from_dict(data["config"]),
                config_hash=str(data["config_hash"]),
                started_at=str(data["started_at"]),
                samples_planned=[PlannedTask.from_dict(p) for p in data["samples_planned"]],
                preset=data.get("preset"),
                plan=None if data.get("plan") is None else Plan.from_dict(data["plan"]),
                versions=dict(data.get("versions") or {}),
                git_sha=data.get("git_sha"),
                hosts=list(data.get("hosts") or []),
                slurm=data.get("slurm"),
                seed=data.get("seed"),
                timings={str(k): float(v) for k, v in (data.get("timings") or {}).items()},
                oom_fallback=list(data.get("oom_fallback") or []),
                finished_at=data.get("finished_at"),
                engine=data.get("engine"),
                devices=[DeviceSummary.from_dict(d) for d in data.get("devices") or []],
                attempts=[Attempt.from_dict(a) for a in data.get("attempts") or []],
                error=data.get("error"),
                shards=None
                if data.get("shards") is None
                else [ShardStatus.from_dict(s) for s in data["shards"]],
                tracking=None
                if data.get("tracking") is None
                else TrackedRun.from_dict(data["tracking"]),
                occupancy=Occupancy.from_dict(data.get("occupancy")),
                admission=data.get("admission"),
                sandbox=None if data.get("sandbox") is None else str(data["sandbox"]),
                user_sim=None
                if data.get("user_sim") is None
                else UserSimulator.from_dict(data["user_sim"]),
                pilot=None if data.get("pilot") is None else PilotRecord.from_dict(data["pilot"]),
                extra={k: v for k, v in data.items() if k not in _KEYS},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DamagedFileError(f"{where} is not a complete manifest ({exc!r}).") from exc


def write_manifest(files: RunDir, manifest: Manifest) -> None:
    """Replace manifest.json atomically (only the directory's holder, evalpipe.rundir.lock)."""
    write_json(files.manifest, manifest.to_dict())


def read_manifest(files: RunDir) -> Manifest | None:
    """The run directory's manifest; None when it has none.

    The one error policy for reading it: a file that cannot be read is a RunDirError; one that
    is not a manifest this evalpipe reads (damaged, incomplete, a newer schema) is a
    DamagedFileError, which readers that go on without it (reports, estimates, status) catch."""
    if not files.manifest.exists():
        return None
    return Manifest.from_dict(read_json(files.manifest), where=str(files.manifest))


def _status(value: Any, kind: Any, what: str) -> Any:
    if value not in get_args(kind):
        raise ValueError(f"{what} {value!r} is not one of {', '.join(get_args(kind))}")
    return value
