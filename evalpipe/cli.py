"""Argument parsing and wiring: each subcommand lives in evalpipe/commands/<name>.py.

A command module defines `HELP` (one line), `ORDER` (position in --help), `add_arguments(parser)`
and `run(args) -> int`. Modules must stay light at import time (heavy libraries are imported
inside `run`), so `evalpipe plan` starts fast on a login node.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

import evalpipe.commands
from evalpipe import __version__
from evalpipe.core.errors import EvalpipeError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evalpipe",
        description="Size, submit, run and report vLLM evaluations of large models on SLURM.",
    )
    parser.add_argument("--version", action="version", version=f"evalpipe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [
        importlib.import_module(f"evalpipe.commands.{info.name}")
        for info in pkgutil.iter_modules(evalpipe.commands.__path__)
        if not info.name.startswith("_")
    ]
    for module in sorted(modules, key=lambda m: (m.ORDER, m.__name__)):
        name = module.__name__.rsplit(".", 1)[1]
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(func=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except EvalpipeError as exc:
        print(f"evalpipe {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except KeyboardInterrupt:
        print(f"evalpipe {args.command}: interrupted", file=sys.stderr)
        return 130
