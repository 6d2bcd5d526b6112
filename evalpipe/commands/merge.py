"""`evalpipe merge RUN_DIR`: combine the shards of an array job into one run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="merge even if shards are missing or unfinished (the result is marked incomplete)",
    )


def run(args: argparse.Namespace) -> int:
    from evalpipe.run.shardmerge import merge_run
    from evalpipe.rundir.summarytext import format_summary

    result = merge_run(args.run_dir, allow_incomplete=args.allow_incomplete)
    print(format_summary(result.summary))
    print(f"\nMerged into {args.run_dir}")
    for line in result.missing:
        print(f"evalpipe merge: incomplete: {line}", file=sys.stderr)
    return 0
