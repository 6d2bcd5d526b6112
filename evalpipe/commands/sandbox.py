"""`evalpipe sandbox FILE.py`: run one Python file as a test program in the code sandbox."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evalpipe.core import exitcodes
from evalpipe.core.isolation import ISOLATION_LEVELS
from evalpipe.core.options import seconds
from evalpipe.sandbox.levels import FULL_ISOLATION


def _source(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path!r}: {exc}") from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.py", type=_source, help="the program to run")
    parser.add_argument(
        "--timeout", type=seconds, default=10.0, metavar="S", help="wall-clock limit (10)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--sandbox",
        choices=ISOLATION_LEVELS,
        default="full",
        help="the weakest isolation to run under: weak accepts the fallback without namespaces "
        "(default full; docs/sandbox.md)",
    )


def run(args: argparse.Namespace) -> int:
    from evalpipe.sandbox import pool as sandbox

    sandbox.require_isolation(args.sandbox)
    result = sandbox.run_program(args.file, timeout_s=args.timeout)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        if result.output_tail:
            print(result.output_tail, end="" if result.output_tail.endswith("\n") else "\n")
        print(f"{result.status}: {result.detail} ({result.duration_s:.3f} s)")
        missing = set(FULL_ISOLATION) - set(result.isolation)
        if missing:
            print(f"note: no {', '.join(sorted(missing))} isolation here; see docs/sandbox.md")
    return exitcodes.OK if result.passed else exitcodes.ERROR
