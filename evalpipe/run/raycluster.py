"""Wait until a Ray cluster started by a multi-node job has all its nodes and GPUs.

A node counts once the GCS has it alive and the autoscaler's status report (what `ray status`
prints) lists it too: the report is refreshed every few seconds and lags the GCS by 5-10 s, so a
job that logs `ray status` straight after a GCS-only check could show a node missing.

Called by slurm_templates/multi_node.sbatch.j2 as
`python -m evalpipe.run.raycluster wait --address HOST:PORT --nodes N [--gpus G] [--timeout S]
[--names NODE ...]`; exits 0 once the cluster is complete, 1 with what is missing when the time
runs out. The template starts each Ray node with a custom resource `evalpipe_node_<NAME>` (its
SLURM node name), so a failure names the nodes that never joined: nodes sharing a host (the
local cluster) report the same IP, and Ray's own node ids mean nothing to a user.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

NODE_RESOURCE = "evalpipe_node_"  # + the SLURM node name: a custom resource on each Ray node


@dataclass(frozen=True, kw_only=True)
class ClusterView:
    nodes: int  # alive nodes, per the GCS
    gpus: float  # total GPUs the alive nodes advertise
    listed: int  # nodes the autoscaler's status report lists as active or idle
    joined: frozenset[str] = frozenset()  # SLURM names of the alive nodes (NODE_RESOURCE)

    @property
    def complete_nodes(self) -> int:
        return min(self.nodes, self.listed)


def listed_nodes(report: bytes | None) -> int:
    """Nodes in the autoscaler's status report (JSON in the GCS KV store; None before the first)."""
    if not report:
        return 0
    autoscaler = json.loads(report).get("autoscaler_report") or {}
    active = autoscaler.get("active_nodes") or {}
    idle = autoscaler.get("idle_nodes") or {}
    return int(sum(active.values()) + sum(idle.values()))


def ray_view(address: str) -> ClusterView:
    """What the cluster at `address` reports, read through a short-lived driver."""
    import ray
    from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS
    from ray.experimental.internal_kv import _internal_kv_get

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        gpus = sum(float(n.get("Resources", {}).get("GPU", 0.0)) for n in alive)
        report = _internal_kv_get(DEBUG_AUTOSCALING_STATUS)  # what `ray status` reads
        joined = frozenset(
            key.removeprefix(NODE_RESOURCE)
            for n in alive
            for key in n.get("Resources", {})
            if key.startswith(NODE_RESOURCE)
        )
        return ClusterView(nodes=len(alive), gpus=gpus, listed=listed_nodes(report), joined=joined)
    finally:
        ray.shutdown()


def wait_for(
    view: Callable[[], ClusterView],
    *,
    nodes: int,
    gpus: float,
    timeout_s: float,
    interval_s: float = 2.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, ClusterView | None, str]:
    """Poll `view` until it shows `nodes` nodes and `gpus` GPUs: (ready, last view, last error)."""
    deadline = clock() + timeout_s
    last: ClusterView | None = None
    error = ""
    while True:
        try:
            last = view()
            error = ""
            if last.complete_nodes >= nodes and last.gpus >= gpus:
                return True, last, ""
        except Exception as exc:  # the head is not up yet: connection refused, timeouts
            error = f"{type(exc).__name__}: {exc}"
        if clock() >= deadline:
            return False, last, error
        sleep(interval_s)


def failure(
    address: str,
    *,
    nodes: int,
    gpus: float,
    timeout_s: float,
    last: ClusterView | None,
    error: str,
    names: Sequence[str] = (),
) -> str:
    """Why the wait gave up: the nodes that never joined (by SLURM name) and what it saw."""
    seen = (
        f"{last.nodes} node(s) alive, {last.listed} in `ray status`, {last.gpus:g} GPU(s)"
        if last
        else "no answer"
    )
    if error:
        seen += f"; {error}"
    joined = last.joined if last else frozenset()
    missing = [name for name in names if name not in joined]
    never = f" Never joined: {', '.join(missing)}." if missing else ""
    where = f" See the Ray step output of {missing[0]} above." if missing else ""
    return (
        f"evalpipe: the Ray cluster at {address} did not reach {nodes} node(s) and "
        f"{gpus:g} GPU(s) within {timeout_s:g} s (saw {seen}).{never}"
        f"{where or ' See the Ray step output above.'}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evalpipe.run.raycluster")
    sub = parser.add_subparsers(dest="command", required=True)
    wait = sub.add_parser("wait", help="wait until the cluster has all nodes and GPUs")
    wait.add_argument("--address", required=True, help="the head's HOST:PORT")
    wait.add_argument("--nodes", type=int, required=True)
    wait.add_argument("--gpus", type=float, default=0.0)
    wait.add_argument("--timeout", type=float, default=180.0, help="seconds (default 180)")
    wait.add_argument(
        "--names", nargs="*", default=(), help="the SLURM names of the nodes that must join"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    ready, last, error = wait_for(
        lambda: ray_view(args.address), nodes=args.nodes, gpus=args.gpus, timeout_s=args.timeout
    )
    took = time.monotonic() - started
    if ready and last is not None:
        print(
            f"evalpipe: Ray cluster at {args.address} is up: {last.complete_nodes} node(s), "
            f"{last.gpus:g} GPU(s) after {took:.0f} s",
            flush=True,
        )
        return 0
    message = failure(
        args.address,
        nodes=args.nodes,
        gpus=args.gpus,
        timeout_s=args.timeout,
        last=last,
        error=error,
        names=args.names,
    )
    print(message, file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
