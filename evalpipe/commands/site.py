"""`evalpipe site detect`: write a cluster profile from the scheduler's own description."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    detect = actions.add_parser(
        "detect",
        help="read `scontrol show partition/node` and write a cluster profile",
        description="Read the partitions and nodes from SLURM (scontrol show partition / "
        "node: GRES, CPUs, memory, MaxTime) and write a cluster profile for --cluster. Values "
        "SLURM cannot tell get working defaults marked CHECK, listed on stderr.",
    )
    detect.add_argument("--partition", help="the partition (default: the only one with GPUs)")
    detect.add_argument(
        "--gres-type", help="the GPU type, where the partition mixes several (gpu:TYPE:N)"
    )
    detect.add_argument(
        "--gpu", help="the configs/gpus.yaml entry, where the GRES type does not say which"
    )
    detect.add_argument("-o", "--output", type=Path, help="write the profile to FILE (a .yaml)")
    detect.add_argument("--force", action="store_true", help="replace an existing --output file")


def run(args: argparse.Namespace) -> int:
    from evalpipe.catalog.containers import RUNTIMES
    from evalpipe.catalog.gpus import load_gpus
    from evalpipe.core.errors import ConfigError
    from evalpipe.rundir.samplelog import write_text
    from evalpipe.slurm import sitedetect
    from evalpipe.slurm.client import Slurm
    from evalpipe.slurm.runtimes import find

    out: Path | None = args.output
    if out is not None:
        if out.suffix not in (".yaml", ".yml"):
            raise ConfigError(f"--output {str(out)!r} must end in .yaml: --cluster takes it then.")
        if out.exists() and not args.force:
            raise ConfigError(f"{out} exists; pass --force to replace it, or choose another name.")
        if not out.parent.is_dir():
            raise ConfigError(f"The folder of --output {str(out)!r} does not exist.")
    slurm = Slurm()
    detected = sitedetect.detect(
        slurm.show("partition"),
        slurm.show("node"),
        load_gpus(),
        python=sys.executable,
        partition=args.partition,
        gres_type=args.gres_type,
        gpu=args.gpu,
        runtimes=[runtime for runtime in RUNTIMES if find(runtime)],  # type: ignore[arg-type]
    )
    sitedetect.validate(detected, out.stem if out else "detected")
    text = detected.yaml()
    if out is None:
        sys.stdout.write(text)
    else:
        write_text(out, text)  # whole or not at all
        print(f"wrote {out} (partition {detected.partition}); use it with --cluster {out}")
    checks = detected.checks()
    if checks:
        print(
            f"evalpipe site detect: check {len(checks)} values SLURM cannot tell:", file=sys.stderr
        )
        for e in checks:
            print(f"  {e.key}: {e.note}", file=sys.stderr)
    return 0
