"""Data-parallel replicas: one engine process per slice of the node, fed as one engine.

`ReplicaPool` is an Engine to the runner: it hands each request to the replica with the most
free room in its window, so work flows to whichever replica frees capacity first (a slow
replica holds at most its own window, never the run). Each replica is a spawned process with
its own CUDA_VISIBLE_DEVICES slice (the CPU engine: its own cores through
VLLM_CPU_OMP_THREADS_BIND) that runs the same engine loop and sends back finished requests.
A replica that dies fails the run with its name; its requests in flight are simply not written,
and a rerun redoes them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import ConfigError, EngineError
from evalpipe.engine.protocol import Engine, EngineSettings, Room
from evalpipe.records.completion import Completion
from evalpipe.records.request import Request

# Seconds a pool waits for a replica's answer before it looks at the stop flag again.
POLL_SECONDS = 0.5


def device_slices(replicas: int, per_replica: int, visible: Sequence[str]) -> list[dict[str, str]]:
    """CUDA_VISIBLE_DEVICES for each replica: consecutive groups of the visible devices (by
    index or UUID, as the job's own CUDA_VISIBLE_DEVICES names them)."""
    if replicas * per_replica > len(visible):
        raise ConfigError(
            f"{replicas} replica(s) × {per_replica} GPU(s) need {replicas * per_replica} GPUs; "
            f"{len(visible)} are visible ({','.join(visible) or 'none'}). Lower --replicas."
        )
    return [
        {"CUDA_VISIBLE_DEVICES": ",".join(visible[i * per_replica : (i + 1) * per_replica])}
        for i in range(replicas)
    ]


def core_slices(replicas: int, cores: Sequence[int]) -> list[dict[str, str]]:
    """VLLM_CPU_OMP_THREADS_BIND for each replica of the CPU engine: the cores split evenly."""
    if replicas > len(cores):
        raise ConfigError(
            f"{replicas} CPU replicas need at least one core each; {len(cores)} are available. "
            "Lower --replicas."
        )
    size = len(cores) // replicas
    return [
        {"VLLM_CPU_OMP_THREADS_BIND": ",".join(str(c) for c in cores[i * size : (i + 1) * size])}
        for i in range(replicas)
    ]


def _serve(
    conn: Connection, backend: str, preset: Preset, settings: EngineSettings, env: dict[str, str]
) -> None:
    """A replica process: build the engine, then add/step/answer until told to close."""
    from evalpipe.engine.factory import open_engine

    # Stop signals are the orchestrator's to handle: it aborts and closes its replicas.
    for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    os.environ.update(env)
    try:
        engine = open_engine(backend, preset, settings)
        conn.send(("ready", engine.describe(), engine.capacity, engine.room()))
        while True:
            messages = []
            if engine.in_flight():
                while conn.poll():
                    messages.append(conn.recv())
            else:
                messages.append(conn.recv())  # idle: wait for work
            for kind, payload in messages:
                if kind == "add":
                    engine.add(payload)
                elif kind == "abort":
                    engine.abort()
                elif kind == "close":
                    engine.close()
                    return
            done = engine.step()
            if done:  # with the description, which changes as it runs (OOM steps, sampling)
                conn.send(("done", done, engine.fallback_steps, engine.describe()))
    except EOFError:  # the orchestrator is gone
        return
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None


class _Replica:
    """The orchestrator's handle on one replica process."""

    def __init__(self, index: int, env: Mapping[str, str], process: Any, conn: Connection):
        self.index = index
        self.env = dict(env)
        self.process = process
        self.conn = conn
        self.capacity = 1
        self.room: Room | None = None
        self.describe: dict[str, Any] = {}
        self.fallback_steps: list[str] = []
        self.in_flight: set[str] = set()

    @property
    def name(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.env.items())
        return f"replica {self.index} (pid {self.process.pid}{', ' + where if where else ''})"

    def receive(self) -> tuple[str, Any]:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise self._died() from None

    def send(self, message: tuple[str, Any]) -> None:
        try:
            self.conn.send(message)
        except OSError:  # a broken pipe: the process is gone
            raise self._died() from None

    def _died(self) -> EngineError:
        self.process.join(timeout=5)
        return EngineError(
            f"{self.name} died (exit status {self.process.exitcode}) with "
            f"{len(self.in_flight)} request(s) in flight; they were not written. Rerun the "
            "same command to resume."
        )


class ReplicaPool(Engine):
    """Several engine processes behind the Engine interface."""

    backend = "replicas"

    def __init__(self, replicas: Sequence[_Replica]) -> None:
        self._replicas = list(replicas)

    @classmethod
    def start(
        cls,
        backend: str,
        preset: Preset,
        settings: EngineSettings,
        envs: Sequence[Mapping[str, str]],
    ) -> ReplicaPool:
        """Start one replica per env and wait until every one has loaded its engine."""
        context = multiprocessing.get_context("spawn")  # no forked CUDA or vLLM state
        replicas = []
        for index, env in enumerate(envs):
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve,
                args=(child, backend, preset, settings, dict(env)),
                name=f"evalpipe-replica-{index}",
                daemon=True,
            )
            process.start()
            child.close()
            replicas.append(_Replica(index, env, process, parent))
        pool = cls(replicas)
        try:
            for replica in replicas:
                kind, *payload = replica.receive()
                if kind != "ready":
                    raise EngineError(f"{replica.name} failed to load the model: {payload[0]}")
                replica.describe, replica.capacity, replica.room = payload
        except BaseException:
            pool.close()
            raise
        return pool

    @property
    def capacity(self) -> int:
        return sum(r.capacity for r in self._replicas)

    def add(self, requests: Sequence[Request]) -> None:
        batches: dict[int, list[Request]] = {}
        for request in requests:
            replica = max(self._replicas, key=lambda r: r.capacity - len(r.in_flight))
            replica.in_flight.add(request.id)
            batches.setdefault(replica.index, []).append(request)
        for index, batch in batches.items():
            self._replicas[index].send(("add", batch))

    def step(self) -> list[Completion]:
        busy = [r for r in self._replicas if r.in_flight]
        if not busy:
            return []
        by_conn = {r.conn: r for r in busy}
        by_sentinel = {r.process.sentinel: r for r in busy}
        done: list[Completion] = []
        for ready in wait([*by_conn, *by_sentinel], timeout=POLL_SECONDS):
            replica = by_conn.get(ready) or by_sentinel[ready]  # type: ignore[index]
            while replica.conn.poll():
                kind, *payload = replica.receive()
                if kind == "error":
                    raise EngineError(f"{replica.name} failed: {payload[0]}")
                completions, replica.fallback_steps, replica.describe = payload
                replica.in_flight.difference_update(c.id for c in completions)
                done.extend(completions)
            if not replica.process.is_alive():
                replica.receive()  # raises, naming the replica
        return done

    def in_flight(self) -> int:
        return sum(len(r.in_flight) for r in self._replicas)

    def abort(self) -> list[str]:
        ids = [rid for r in self._replicas for rid in r.in_flight]
        for replica in self._replicas:
            if replica.in_flight and replica.process.is_alive():
                with contextlib.suppress(EngineError):  # a dead one holds nothing to abort
                    replica.send(("abort", None))
            replica.in_flight.clear()
        return ids

    def room(self) -> Room | None:
        """The replicas' slots and caches together (they take from one admission queue)."""
        rooms = [r.room for r in self._replicas if r.room is not None]
        if not rooms or len(rooms) < len(self._replicas):
            return None  # none, or one that cannot tell
        return sum(rooms[1:], start=rooms[0])

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "replicas",
            "replicas": [
                {"index": r.index, "env": r.env, "pid": r.process.pid, **r.describe}
                for r in self._replicas
            ],
        }

    @property
    def fallback_steps(self) -> list[str]:
        steps: list[str] = []
        for replica in self._replicas:
            steps += [s for s in replica.fallback_steps if s not in steps]
        return steps

    def close(self) -> None:
        for replica in self._replicas:
            if replica.process.is_alive():
                with contextlib.suppress(OSError):
                    replica.conn.send(("close", None))
        for replica in self._replicas:
            replica.process.join(timeout=30)
            if replica.process.is_alive():
                replica.process.kill()
                replica.process.join()
            replica.conn.close()
