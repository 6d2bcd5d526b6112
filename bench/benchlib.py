"""Shared by the bench/ scripts: interleaved repetitions, medians, child processes, the machine.

Ratios are only meaningful when both sides ran under the same conditions, so every script
alternates its cases within one run (A B, B A, A B, ...) and reports medians, never absolute
times from separate runs.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: this checkout first on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@dataclass(frozen=True, kw_only=True)
class Timing:
    """One child process: wall seconds, and CPU seconds (user + system, its children included),
    which other load on a shared machine disturbs less than wall time."""

    wall_s: float
    cpu_s: float


def _run(argv: Sequence[str], env: Mapping[str, str] | None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        list(argv), env=dict(env or child_env()), cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {done.returncode}:\n"
            f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Timing:
    """Time one child process; a failing child is a RuntimeError showing its output's tail."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    _run(argv, env)
    return Timing(wall_s=time.perf_counter() - t0, cpu_s=_children_cpu() - cpu0)


def json_child(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run a child that prints one JSON object as its last stdout line; return that object."""
    return json.loads(_run(argv, env).stdout.strip().splitlines()[-1])


def interleave(cases: Mapping[str, Callable[[], Any]], reps: int) -> dict[str, list[Any]]:
    """Call every case `reps` times, rotating the order each round so none always goes first."""
    names = list(cases)
    results: dict[str, list[Any]] = {name: [] for name in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            results[name].append(cases[name]())
            print(f"  rep {rep + 1}/{reps} {name} done", file=sys.stderr, flush=True)
    return results


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> str:
    """'median (min–max, n=K)' for a table cell."""
    return f"{median(values):.3f} ({min(values):.3f}–{max(values):.3f}, n={len(values)})"


def machine() -> str:
    """One line naming the machine the figures were taken on."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if "model name" in ln), "?"
    )
    avx512 = "AVX-512" if " avx512f" in cpuinfo else "no AVX-512"
    mem_kib = 0
    if Path("/proc/meminfo").exists():
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_kib = int(first.split()[1])
    return (
        f"{os.cpu_count()} cores {platform.machine()} {avx512} ({model}), "
        f"{mem_kib / 2**20:.0f} GiB, Python {platform.python_version()}, {platform.platform()}"
    )


def verdict(value: float, target: float) -> str:
    """'meets' or 'MISSES' a ≤ target."""
    return "meets" if value <= target else "MISSES"
