"""A local run's user simulator behind its own vLLM server: `evalpipe run --user-sim PRESET` with
a preset other than the run's and no --user-sim-base-url starts `evalpipe serve` for it on this
machine (run/vllmserver.py), waits until it answers, hands its endpoint to the episodes and
stops it when they end. A job starts the same server from its script instead
(slurm_templates/_usersim.sh.j2)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evalpipe.catalog.preset import load_preset
from evalpipe.core.errors import EngineError
from evalpipe.run.vllmserver import READY_TIMEOUT_S, free_port, served_name, wait_ready

STOP_S = 60.0  # SIGTERM lets vLLM stop its engine processes; SIGKILL after this long


@dataclass(frozen=True, kw_only=True)
class UserSimEndpoint:
    """Where the user simulator answers: what --user-sim-base-url and --user-sim-model say."""

    base_url: str
    model: str


def server_command(preset_ref: str, *, port: int, skip_gpus: int | None = None) -> list[str]:
    """`evalpipe serve` for the user simulator's preset (a name or a path): one replica, its
    planned layout, on the visible GPUs after the first `skip_gpus` (the model's)."""
    argv = [sys.executable, "-m", "evalpipe", "serve", "--preset", preset_ref]
    argv += ["--replicas", "1", "--port", str(port)]
    return argv + ([] if skip_gpus is None else ["--skip-gpus", str(skip_gpus)])


@contextmanager
def user_sim_server(
    preset_ref: str,
    *,
    log: Path,
    skip_gpus: int | None = None,
    timeout_s: float = READY_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
) -> Iterator[UserSimEndpoint]:
    """Serve `preset_ref` on a free loopback port for the duration of the block, its output
    appended to `log`; EngineError naming the log when it dies or is not ready in time."""
    model = served_name(load_preset(preset_ref))  # a bad preset is refused before anything starts
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            server_command(preset_ref, port=port, skip_gpus=skip_gpus),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
        )
    try:
        ready, why = wait_ready(
            base_url, model, timeout_s=timeout_s, alive=lambda: process.poll() is None
        )
        if not ready:
            raise EngineError(
                f"The user simulator's vLLM server for {preset_ref} at {base_url} is not usable: "
                f"{why}; its log: {log}. Fix what the log names, or serve the user simulator "
                "elsewhere and pass --user-sim-base-url."
            )
        yield UserSimEndpoint(base_url=base_url, model=model)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
