"""Predicted against measured wall time of `evalpipe run` on the CPU engine, after one smoke
calibration, for three task mixes: short answers, long generations, multiple choice by logprobs.

    python bench/estimate.py [--out DIR] [--reps 2] [--preset P] [--limit N] [--backend B]
    python bench/estimate.py --quick    # tiny_random, 2 samples a mix, runs on the fake engine

Steps: `evalpipe smoke --local --gpu cpu` once (the calibration); a pilot run of 16 samples of
each generating mix (the "past runs of the task" the work model takes generated lengths from;
their throughput is NOT used: the prediction is calibrated on the smoke record alone); then for
each mix the estimate (Python API, as `plan --estimate` makes it; a second one also calibrated
on the pilot runs' throughput) and `evalpipe run` itself, timed as a process, `--reps` times.
Prints a markdown table; the machine's load before each run goes to stderr and the JSON.
--quick calibrates tiny_random for real but runs the pilots and the mixes on the fake engine:
its errors mean nothing; it checks the script's use of smoke, estimate and `evalpipe run`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from benchlib import (
    QUICK_PRESET,
    REPO,
    VLLM_ENV,
    child_env,
    load_average,
    machine,
    median,
    parse_args,
    timed_run,
)

from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.selection import Selection
from evalpipe.estimate.predict import predictor
from evalpipe.planning import planner

DEVICE = "cpu"
MIXES = {
    "short answers": Selection(tasks=("arithmetic",), limit=200),
    "long generations": Selection(tasks=("humaneval",), limit=60),
    "multiple choice by logprobs": Selection(tasks=("ordering",), limit=200, mc_method="logprobs"),
}
TARGET = 0.25


def _run_argv(args: argparse.Namespace, selection: Selection, out: Path, limit: int) -> list[str]:
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", args.preset, "--out", str(out)]
    argv += ["--tasks", ",".join(selection.tasks or ()), "--limit", str(limit)]
    argv += ["--backend", args.backend]
    return argv + (["--mc-method", selection.mc_method] if selection.mc_method else [])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="working folder (default: a temporary one)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared preset")
    parser.add_argument("--limit", type=int, help="samples per mix (default: each mix's own)")
    parser.add_argument("--pilot", type=int, default=16, help="samples per pilot run")
    parser.add_argument(
        "--backend", choices=("vllm", "fake"), default="vllm", help="engine of the runs"
    )
    args = parse_args(
        parser, {"reps": 1, "preset": QUICK_PRESET, "limit": 2, "pilot": 2, "backend": "fake"}
    )
    mixes = {
        name: dataclasses.replace(selection, limit=args.limit or selection.limit)
        for name, selection in MIXES.items()
    }
    out = args.out or Path(tempfile.mkdtemp(prefix="evalpipe-estimate-"))
    env = child_env(**VLLM_ENV)
    print(f"# {machine()}\n# start: {load_average()}", file=sys.stderr)
    smoke = out / "smoke"
    if not list(smoke.glob("*.calibration.json")):
        argv = [sys.executable, "-m", "evalpipe", "smoke", "--local", "--gpu", DEVICE]
        # Always the real engine: the fake one records no decoding rate to calibrate on.
        argv += ["--preset", args.preset, "--out", str(smoke)]
        timed_run(argv, env=env)
    pilots = out / "pilots"
    for name, selection in mixes.items():
        target = pilots / name.replace(" ", "-")
        if selection.mc_method is None and not (target / "summary.json").exists():
            timed_run(_run_argv(args, selection, target, args.pilot), env=env)
    preset = load_preset(args.preset)
    gpu = get_gpu(DEVICE)
    plan = planner.plan(preset, gpu, gpus_per_node=1)
    rows = []
    for name, selection in mixes.items():
        est, with_runs = (
            predictor(
                preset, gpu, plan, selection, results=[pilots], calibration_dirs=[smoke],
                calibrate_on_runs=runs,
            ).estimate()
            for runs in (False, True)
        )  # fmt: skip
        walls, loads = [], []
        for rep in range(args.reps):
            before = load_average()
            run_dir = out / "runs" / f"{name.replace(' ', '-')}-{rep}"
            timing = timed_run(_run_argv(args, selection, run_dir, selection.limit or 0), env=env)
            walls.append(timing.wall_s)
            loads.append(before)
            print(f"  {name} rep {rep + 1}: {timing.wall_s:.1f} s ({before})", file=sys.stderr)
        measured = median(walls)
        error = est.wall_s.mid / measured - 1
        rows.append(
            {
                "mix": name,
                "tasks": ",".join(selection.tasks or ()),
                "samples": sum(t.samples for t in est.tasks),
                "predicted_s": round(est.wall_s.mid, 1),
                "range_s": [round(est.wall_s.low, 1), round(est.wall_s.high, 1)],
                "measured_s": [round(w, 1) for w in walls],
                "error": round(error, 3),
                # The same with the pilot runs' measured throughput as a second calibration.
                "predicted_with_runs_s": round(with_runs.wall_s.mid, 1),
                "error_with_runs": round(with_runs.wall_s.mid / measured - 1, 3),
                "meets": abs(error) <= TARGET,
                "load": loads,
                "sources": [s for t in est.tasks for s in t.sources],
            }
        )
    print(f"# end: {load_average()}", file=sys.stderr)
    print(
        "| mix | tasks | n | predicted wall (low–high) | measured wall (reps) | error | ±25 % "
        "| with pilot runs: predicted, error |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        low, high = r["range_s"]
        reps = ", ".join(f"{w:.1f}" for w in r["measured_s"])
        verdict = "meets" if r["meets"] else "MISSES"
        print(
            f"| {r['mix']} | {r['tasks']} | {r['samples']} | {r['predicted_s']:.1f} s "
            f"({low:.1f}–{high:.1f}) | {median(r['measured_s']):.1f} s ({reps}) | "
            f"{r['error']:+.0%} | {verdict} | {r['predicted_with_runs_s']:.1f} s, "
            f"{r['error_with_runs']:+.0%} |"
        )
    (out / "estimate-bench.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n(raw figures: {out / 'estimate-bench.json'}; repository {REPO})", file=sys.stderr)
    return 0 if args.quick or all(r["meets"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
