"""Which isolation level a sandbox server's parts add up to, and why the weak one is refused."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from evalpipe.core.isolation import IsolationLevel

FULL_ISOLATION = ("network", "filesystem", "pid")  # the parts that make a level full
# The part a server asked to keep the host's network has instead of "network" (pool.Network).
HOST_NETWORK = "host-network"


def isolation_level(parts: Iterable[str]) -> IsolationLevel:
    """`full` where every part of FULL_ISOLATION held (a server that was asked for the host's
    network: every other part), else `weak`."""
    held = set(parts)
    needed = set(FULL_ISOLATION) - ({"network"} if HOST_NETWORK in held else set())
    return "full" if needed <= held else "weak"


def weak_refused(notes: Sequence[str]) -> str:
    """Why code is not run with the weak fallback, what is missing, and how to get it."""
    why = "; ".join(notes) or "namespaces were refused"
    return (
        f"The code sandbox has only its weak fallback here ({why}): model-written code would "
        "have the network, the file system and the runner's processes within reach. Allow "
        "namespaces (run as root or with CAP_SYS_ADMIN, or enable unprivileged user namespaces: "
        "sysctl user.max_user_namespaces > 0, and on Ubuntu 24.04+ an AppArmor profile that "
        "allows them; in Docker, --security-opt seccomp=unconfined or --cap-add SYS_ADMIN), or "
        "accept the fallback with --sandbox weak. docs/sandbox.md says what each level holds."
    )
