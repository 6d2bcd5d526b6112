"""What the sandbox is asked to run: a `Program` (evalpipe.sandbox.pool runs it). A record only,
so that building programs (the code scorers) imports nothing that starts or manages processes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Program:
    """A program with its input: the source, and what its stdin holds (None: /dev/null).

    `capture_stdout`: keep its stdout whole and apart from stderr (SandboxResult.stdout), for
    judges that compare output. `exit_ok`: `sys.exit()` / `SystemExit` with any code counts as
    reaching the end, as a stdin/stdout judge treats a program that exits after printing.
    `tests`: see docs/sandbox.md, "The verdict": the only form whose pass model code cannot
    forge."""

    source: str
    stdin: str | None = None
    capture_stdout: bool = False
    exit_ok: bool = False
    # The benchmark's test code, run in a process of its own that calls `source`'s functions
    # with copies of plain data; the program passes when these tests run to their end. None:
    # `source` is the whole program and its own end is the verdict.
    tests: str | None = None
    # Folders the sandbox hides (those under home directories) that the program may read: shown
    # read-only at their own paths, by a server started for this set (a model cache's folder).
    shown: tuple[str, ...] = ()
