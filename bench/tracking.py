"""What tracking costs a run: `evalpipe run` untracked, beside the same run with `--track mlflow`
against a tracking URI that refuses connections, with `--track mlflow` to a file store and with
`--track wandb` offline, all interleaved; and the trackers' import times: a fresh Python
importing the tracker's library, less a fresh Python alone (start-up and teardown included: a
tracked run's process pays for both, and tearing down MLflow's modules takes seconds here).

    python bench/tracking.py [--samples 200] [--delay 1.0] [--reps 3]
    python bench/tracking.py --quick

The runs use the fake engine (`--backend fake`, each request taking --delay seconds, as a model
would) on the arithmetic task, so the wall time is the runner's and the tracker's, not a
model's. Target (issue 27): a refused tracker's run within the untracked wall + 2 % + the
tracker's import time (the import happens on the tracking thread, beside the run, but competes
for the CPU). The tracked cases' overhead is shown against the same bound.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchlib import (
    child_env,
    interleave,
    load_average,
    machine,
    median,
    parse_args,
    spread,
    timed_run,
    verdict,
)

from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.summary import read_summary

REFUSING_URI = "http://127.0.0.1:9"  # the discard port: nothing listens, connections refused
IMPORTS = {
    "mlflow": "from mlflow.tracking import MlflowClient",
    "wandb": "import wandb",
}
TARGET_SHARE = 0.02


def run_case(samples: int, delay: float, track: str | None, env: dict[str, str]):
    def go():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            argv = [sys.executable, "-m", "evalpipe", "run", "--preset", "tiny_random"]
            argv += ["--backend", "fake", "--tasks", "arithmetic", "--limit", str(samples)]
            argv += ["--out", str(out), *(["--track", track] if track else [])]
            timing = timed_run(argv, env=child_env(EVALPIPE_FAKE_DELAY_S=str(delay), **env))
            summary = read_summary(RunDir(out))
            done = summary.n_done if summary else None
            if done != samples:
                raise RuntimeError(f"{track}: {done} of {samples} samples written")
            return timing.wall_s

    return go


def import_case(tracker: str | None):
    """A fresh Python that imports the tracker (None: nothing): its whole wall, interpreter
    start and teardown included, since a tracked run pays for both."""
    code = IMPORTS[tracker] if tracker else "pass"
    return lambda: timed_run([sys.executable, "-c", code]).wall_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200, help="arithmetic has 200")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds per request")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--cases", default="untracked,refused,mlflow-file,wandb-offline", help="comma list"
    )
    args = parse_args(
        parser,
        {"samples": 20, "delay": 0.01, "reps": 1, "cases": "untracked,refused"},
        argv,
    )
    print(machine())
    print(load_average())
    cases = {
        "untracked": run_case(args.samples, args.delay, None, {}),
        "refused": run_case(
            args.samples, args.delay, "mlflow", {"MLFLOW_TRACKING_URI": REFUSING_URI}
        ),
        # No MLFLOW_TRACKING_URI: the file store in the run directory.
        "mlflow-file": run_case(args.samples, args.delay, "mlflow", {"MLFLOW_TRACKING_URI": ""}),
        "wandb-offline": run_case(args.samples, args.delay, "wandb", {"WANDB_MODE": "offline"}),
        "python alone": import_case(None),
        "import mlflow": import_case("mlflow"),
        "import wandb": import_case("wandb"),
    }
    chosen = args.cases.split(",")
    wanted = [c for c in chosen if c in cases]
    wanted += ["python alone", "import mlflow"]
    wanted += ["import wandb"] if "wandb-offline" in chosen else []
    results = interleave({name: cases[name] for name in wanted}, args.reps)
    print(f"\n{args.samples} samples, {args.delay} s per request, {args.reps} repetition(s):")
    for name, values in results.items():
        print(f"  {name:<14} wall s: {spread(values)}")
    base = median(results["untracked"])
    for name in ("refused", "mlflow-file", "wandb-offline"):
        if name not in results:
            continue
        tracker = "wandb" if name.startswith("wandb") else "mlflow"
        imported = median(results[f"import {tracker}"]) - median(results["python alone"])
        bound = base * (1 + TARGET_SHARE) + imported
        wall = median(results[name])
        print(
            f"target {name} wall {wall:.2f} s <= untracked {base:.2f} s + 2 % + import "
            f"{imported:.2f} s = {bound:.2f} s: {verdict(wall, bound)} "
            f"(overhead beyond the import {wall - base - imported:+.2f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
