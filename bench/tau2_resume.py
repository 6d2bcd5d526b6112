"""τ²-bench: a run killed with SIGKILL at random points, resumed, against the same run whole.

    python bench/tau2_resume.py                  # 24 airline episodes, killed 3 times
    python bench/tau2_resume.py --episodes 40 --kills 5 --seed 7
    python bench/tau2_resume.py --quick          # 6 episodes, killed twice

No model: tests/tau2_scripted.py's scripted agent and user (the agent performing each task's
ground-truth actions on even tasks and doing nothing on odd ones), each engine call delayed so
that the episodes are under way side by side. The run is a process (`tests/tau2_scripted.py`)
killed with SIGKILL once its steps.jsonl holds a number of steps drawn at random between the
last kill's and the whole run's total, `--kills` times, then resumed to the end. Checked against
the same episodes run whole: every episode's completions, scores and refusal equal, and every
step (episode, index, text, outcome) recorded once, none dropped or duplicated. Exit 1 on any
difference.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchlib
from tau2_agreement import distinct
from tau2_scripted import run, subset

from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_samples

SCRIPTED = benchlib.REPO / "tests" / "tau2_scripted.py"
PATHS = {"PYTHONPATH": os.pathsep.join([str(benchlib.REPO), str(benchlib.REPO / "tests")])}


def records(out: Path) -> dict[str, dict[str, Any]]:
    if not RunDir(out).samples.exists():
        return {}
    return {r.sample_id: r.to_dict() for r in read_samples(RunDir(out).samples).records}


def steps(out: Path) -> list[tuple[str, int, str, str]]:
    path = RunDir(out).steps
    lines = path.read_text().splitlines() if path.exists() else []
    return sorted((s["sample_id"], s["index"], s["text"], json.dumps(s["outcome"], sort_keys=True))
                  for s in map(json.loads, lines))  # fmt: skip


def killed_at(out: Path, argv: list[str], at: int, timeout_s: float = 600) -> bool:
    """Run `argv` until `out` holds `at` steps, then SIGKILL it; False if it ended first."""
    env = {**os.environ, **PATHS}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    while len(steps(out)) < at:
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the run did not reach {at} steps in {timeout_s:.0f} s")
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", default="airline")
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per engine call")
    parser.add_argument("--seed", type=int, default=1)
    args = benchlib.parse_args(parser, {"episodes": 6, "kills": 2})
    print(benchlib.machine())
    ids = distinct(args.domain)[: args.episodes]
    modes = {task_id: "gt" if i % 2 == 0 else "idle" for i, task_id in enumerate(ids)}
    draw = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        whole, out = Path(tmp) / "whole", Path(tmp) / "killed"
        assert run(whole, subset(args.domain, ids), modes).status == "complete"
        total = len(steps(whole))
        argv = [sys.executable, str(SCRIPTED), str(out), args.domain, str(args.delay),
                json.dumps(modes), *ids]  # fmt: skip
        points = []
        for _ in range(args.kills):
            done = len(steps(out))
            at = draw.randint(done + 1, max(done + 1, total - 1))
            if not killed_at(out, argv, at):
                break
            points.append(f"{len(steps(out))}/{total}")
        print(
            f"{len(ids)} {args.domain} episodes, {total} steps; killed at steps {', '.join(points)}"
        )
        resumed = subprocess.run(argv, env={**os.environ, **PATHS}, capture_output=True)
        ours, theirs = records(out), records(whole)
        wrong = [
            f"{sample_id} {key}"
            for sample_id, record in theirs.items()
            for key in ("completions", "extracted", "scores", "refusal")
            if ours.get(sample_id, {}).get(key) != record.get(key)
        ]
        got, want = steps(out), steps(whole)
        step_wrong = [] if got == want else [f"{len(got)} steps recorded, {len(want)} whole"]
        status = benchlib.print_checks({
            "episodes equal to the run whole (completions, scores, refusal)":
                (len(theirs), sorted(set(wrong))),
            "steps recorded once each, equal to the run whole": (1, step_wrong),
        })  # fmt: skip
        ended = len(points) == args.kills and resumed.returncode == 0
        if not ended:
            print(
                f"NOT DONE: {len(points)} of {args.kills} kills; resume exit {resumed.returncode}"
            )
        return status or (0 if ended else 1)


if __name__ == "__main__":
    sys.exit(main())
