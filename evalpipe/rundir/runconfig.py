"""The run's configuration (manifest.json's `config`) as a typed record, and its fingerprint.

A run directory belongs to one configuration. Its fingerprint (`RunConfig.fingerprint`) covers
everything that changes which samples are run or what they yield; the engine layout (TP/PP,
executor, OOM fallback, replicas) is recorded but left out, because a requeued job may land on
a different layout and greedy outputs do not depend on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.rundir.shard import Shard

# Recorded under this key of the config, excluded from the fingerprint (see above).
UNHASHED = "engine"

_KEYS = (
    "preset", "model", "backend", "categories", "tasks", "definitions", "limit", "shard",
    "sampling", "engine", "deterministic", "packages",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What a run evaluates and how. `model`, `definitions`, `sampling` and `engine` are kept
    as the JSON they were written as: the fingerprint is taken over exactly that JSON."""

    preset: str
    backend: str
    tasks: tuple[str, ...]
    model: dict[str, Any] = field(default_factory=dict)  # the preset's model-defining fields
    categories: tuple[str, ...] | None = None
    definitions: dict[str, Any] = field(default_factory=dict)  # task → its definition
    limit: int | None = None
    shard: str | None = None  # "i/N"
    sampling: dict[str, Any] = field(default_factory=dict)  # task → its sampling settings
    engine: dict[str, Any] = field(default_factory=dict)  # EngineSettings + replicas
    # Absent from the JSON when off: runs made before the mode existed keep their fingerprint.
    deterministic: bool = False
    # The installed packages the tasks read prompts or data from: distribution → version.
    # Absent from the JSON when none: runs of other tasks keep their fingerprint.
    packages: dict[str, str | None] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know

    @property
    def tensor_parallel_size(self) -> int:
        return int(self.engine.get("tensor_parallel_size") or 1)

    @property
    def pipeline_parallel_size(self) -> int:
        return int(self.engine.get("pipeline_parallel_size") or 1)

    @property
    def replicas(self) -> int:
        return int(self.engine.get("replicas") or 1)

    @property
    def gpus(self) -> int:
        """GPUs the layout asks for: every replica's TP × PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.replicas

    def shard_of(self) -> Shard | None:
        """The slice this run evaluated; None for an unsharded run or an unreadable value."""
        try:
            return Shard.parse(str(self.shard)) if self.shard is not None else None
        except ConfigError:
            return None

    def unsharded(self) -> RunConfig:
        return dataclasses.replace(self, shard=None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "preset": self.preset,
            "model": self.model,
            "backend": self.backend,
            "categories": None if self.categories is None else list(self.categories),
            "tasks": list(self.tasks),
            "definitions": self.definitions,
            "limit": self.limit,
            "shard": self.shard,
            "sampling": self.sampling,
            "engine": self.engine,
        }
        if self.deterministic:
            out["deterministic"] = True
        if self.packages:
            out["packages"] = self.packages
        return self.extra | out

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        """Raises ValueError naming what is missing or malformed."""
        if not isinstance(data, dict):
            raise ValueError(f"config must be a JSON object, not {type(data).__name__}")
        try:
            categories = data.get("categories")
            return cls(
                preset=str(data["preset"]),
                backend=str(data["backend"]),
                tasks=tuple(str(t) for t in data["tasks"]),
                model=dict(data.get("model") or {}),
                categories=None if categories is None else tuple(map(str, categories)),
                definitions=dict(data.get("definitions") or {}),
                limit=None if data.get("limit") is None else int(data["limit"]),
                shard=None if data.get("shard") is None else str(data["shard"]),
                sampling=dict(data.get("sampling") or {}),
                engine=dict(data.get("engine") or {}),
                deterministic=bool(data.get("deterministic", False)),
                packages=dict(data.get("packages") or {}),
                extra={k: v for k, v in data.items() if k not in _KEYS},
            )
        except KeyError as exc:
            raise ValueError(f"config lacks {exc.args[0]!r}") from exc
        except TypeError as exc:
            raise ValueError(f"config is malformed ({exc})") from exc

    def fingerprint(self) -> str:
        """The config_hash: what must match for a run directory to be resumed."""
        return _config_hash(self.to_dict())

    def diff(self, other: RunConfig) -> list[str]:
        """'key: old → new' for every fingerprinted value that differs, in key order."""
        return _config_diff(self.to_dict(), other.to_dict())


def _config_hash(config: Mapping[str, Any]) -> str:
    hashed = {k: v for k, v in config.items() if k != UNHASHED}
    canonical = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value
    return out


def _config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    a = _flatten({k: v for k, v in old.items() if k != UNHASHED}, "", {})
    b = _flatten({k: v for k, v in new.items() if k != UNHASHED}, "", {})
    missing = "(absent)"
    return [
        f"{key}: {json.dumps(a.get(key, missing))} → {json.dumps(b.get(key, missing))}"
        for key in sorted(a.keys() | b.keys())
        if a.get(key, missing) != b.get(key, missing)
    ]
