"""Time `evalpipe report` over many synthetic run directories (default: 1,000 runs).

    python bench/report_scale.py [--runs 1000] [--tasks 4] [--samples 100] [--format md]
    python bench/report_scale.py --quick    # 20 runs of 10 samples a task

Builds the runs in a temporary folder (4 categories, seeded 0/1 scores, one GPU, metrics.csv),
then runs `python -m evalpipe report DIR` as a user would and prints the wall time. The target
is under 10 s for 1,000 runs.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO, child_env, children_cpu, parse_args

# The synthetic run directories are a test fixture (tests/synthetic_runs.py), not in the package.
sys.path.insert(0, str(REPO / "tests"))
from synthetic_runs import SyntheticRun, write_run

CATEGORIES = ("math", "code", "mc", "reasoning")


def build(root: Path, *, runs: int, tasks: int, samples: int) -> int:
    """Write `runs` run directories under root; returns the number of samples written."""
    rng = random.Random(0)
    presets = [f"model_{i:02d}" for i in range(20)]
    for i in range(runs):
        quality = rng.uniform(0.3, 0.9)
        run_tasks = {
            f"task_{t}": (
                CATEGORIES[t % len(CATEGORIES)],
                [1.0 if rng.random() < quality else 0.0 for _ in range(samples)],
            )
            for t in range(tasks)
        }
        write_run(
            root / f"batch_{i // 100}" / f"run_{i:04d}",
            SyntheticRun(
                run_id=f"run_{i:04d}",
                preset=presets[i % len(presets)],
                tasks=run_tasks,
                gpus=1,
                wall_s=100.0 + i % 50,
            ),
        )
    return runs * tasks * samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--samples", type=int, default=100, help="samples per task")
    parser.add_argument("--format", default="md", choices=("md", "csv", "json", "html"))
    args = parse_args(parser, {"runs": 20, "samples": 10})
    with tempfile.TemporaryDirectory(prefix="evalpipe-report-scale-") as tmp:
        start = time.perf_counter()
        n = build(Path(tmp), runs=args.runs, tasks=args.tasks, samples=args.samples)
        built = time.perf_counter() - start
        start = time.perf_counter()
        cpu_before = children_cpu()
        proc = subprocess.run(
            [sys.executable, "-m", "evalpipe", "report", tmp, "--format", args.format],
            env=child_env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - start
        cpu = children_cpu() - cpu_before
    print(f"built {args.runs} run dirs ({n:,} samples) in {built:.1f} s")
    print(
        f"evalpipe report --format {args.format}: {wall:.2f} s wall, {cpu:.2f} s CPU for "
        f"{args.runs} runs, {len(proc.stdout):,} characters of output (target < 10 s wall)"
    )


if __name__ == "__main__":
    main()
