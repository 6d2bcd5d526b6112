"""The code sandbox's isolation levels by name, for every layer that names one (a cluster
profile's `sandbox:`, `--sandbox`, the sandbox itself; docs/sandbox.md says what each holds).

full: the program's own network, file system view and PID namespace; weak: the fallback where
namespaces are refused, rlimits and a temporary folder only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

IsolationLevel = Literal["full", "weak"]
ISOLATION_LEVELS: tuple[IsolationLevel, ...] = get_args(IsolationLevel)


def weakest(levels: Iterable[str | None]) -> str | None:
    """The weakest level among the parts of a run (shards, jobs); None where none scored code."""
    found = {level for level in levels if level is not None}
    return "weak" if "weak" in found else next(iter(found), None)
