"""Argument parsing and wiring: each verb lives in evalpipe/commands/<verb>.py.

A command module defines `add_arguments(parser)` and `run(args) -> int`; evalpipe.commands.VERBS
gives its one-line help and its place in --help. Only the verb that runs is imported and gets
its flags, and modules stay light at import time (heavy libraries are imported inside `run`), so
`evalpipe plan` and `evalpipe render` start fast on a login node.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from evalpipe import __version__
from evalpipe.commands import VERBS
from evalpipe.core.errors import EvalpipeError


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """Every verb with its one-line help; `verb`'s module is imported and its flags added."""
    parser = argparse.ArgumentParser(
        prog="evalpipe",
        description="Size, submit, run and report vLLM evaluations of large models on SLURM.",
    )
    parser.add_argument("--version", action="version", version=f"evalpipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_line in VERBS.items():
        command = sub.add_parser(name, help=help_line, description=help_line)
        if name == verb:
            module = importlib.import_module(f"evalpipe.commands.{name}")
            module.add_arguments(command)
            command.set_defaults(func=module.run)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """`argv` parsed with the flags of the verb it names: its first word that is not an option
    (the top level's options take no value)."""
    verb = next((word for word in argv if not word.startswith("-")), None)
    return build_parser(verb).parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        return int(args.func(args))
    except EvalpipeError as exc:
        print(f"evalpipe {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print(f"evalpipe {args.command}: interrupted", file=sys.stderr)
        return 130


def entry() -> NoReturn:
    """The process's way in (`python -m evalpipe`, the `evalpipe` script): `main`'s status is the
    exit status, and a tracker the run stopped waiting for does not hold the exit."""
    status = main()
    tracking = sys.modules.get("evalpipe.run.tracking")  # not imported: nothing was tracked
    if tracking is not None and tracking.left_behind():
        # wandb's atexit hook waits for its service process, which retries an unreachable
        # server until its own timeout (90 s): a job would hold its GPUs that long after its
        # work. By now every file evalpipe writes is closed (samples fsynced, manifest and
        # summary replaced whole) and the results are printed, so ending here skips only the
        # trackers' own teardown, whose run `evalpipe report --export` logs later; the
        # buffered output is flushed and the status kept.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    raise SystemExit(status)
