"""`evalpipe track sync`: upload the W&B runs that jobs logged offline (compute nodes rarely
reach the internet), from a login node that does."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sync = sub.add_parser(
        "sync",
        help="upload RUN/wandb/offline-run-* (and each shard's) with wandb sync; the key from "
        "WANDB_API_KEY or `wandb login`",
    )
    sync.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run directories")
    sync.add_argument(
        "--dry-run", action="store_true", help="list what would be uploaded; upload nothing"
    )


def run(args: argparse.Namespace) -> int:
    from evalpipe.run.trackers import sync

    return sync(args.runs, dry_run=args.dry_run)
