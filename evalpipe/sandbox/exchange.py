"""Run a trusted program over untrusted data in the sandbox: the data goes in as JSON on its
stdin, its answer comes back as JSON, the last line of its stdout.

For scoring that must call a library's own function on the model's code (lm-eval's
`process_results` for a task marked unsafe_code) rather than run that code as a program of its
own: the function runs sandboxed, and only data crosses the boundary.
"""

from __future__ import annotations

import json
from typing import Any

from evalpipe.sandbox.pool import Limits, Network, Program, SandboxResult, run_program


def run_exchange(
    source: str,
    data: Any,
    *,
    timeout_s: float,
    limits: Limits | None = None,
    network: Network | None = None,
    shown: tuple[str, ...] = (),
) -> tuple[Any, SandboxResult]:
    """(the program's answer, how it ended); the answer is None unless it ran to its end and
    its stdout's last line is JSON (what the code it ran printed before that is ignored). With
    `network`, the program has the host's network (pool.Network): it must gate what it runs.
    `shown`: hidden folders it may read (Program.shown)."""
    program = Program(source=source, stdin=json.dumps(data), capture_stdout=True, shown=shown)
    result = run_program(program, timeout_s=timeout_s, limits=limits, network=network)
    lines = (result.stdout or "").rstrip("\n").rpartition("\n")
    if not result.passed or result.stdout_truncated or not lines[2]:
        return None, result
    try:
        return json.loads(lines[2]), result
    except ValueError:
        return None, result
