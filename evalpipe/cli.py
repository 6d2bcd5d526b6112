"""Argument parsing and wiring: each verb lives in evalpipe/commands/<verb>.py.

A command module defines `add_arguments(parser)` and `run(args) -> int`; evalpipe.commands.VERBS
gives its one-line help and its place in --help. Only the verb that runs is imported and gets
its flags, and modules stay light at import time (heavy libraries are imported inside `run`), so
`evalpipe plan` and `evalpipe render` start fast on a login node.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

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
