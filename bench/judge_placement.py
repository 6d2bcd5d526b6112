"""Both judge placements timed on the local SLURM cluster, one job each, and the memory of each
job's process tree between the phases.

    python bench/judge_placement.py [--samples 64] [--delay 1.0] [--reps 2]
    python bench/judge_placement.py --quick    # 4 samples, 0.05 s per request, once

A functional check on this 2-core machine (scripts/local-slurm.sh must be running): the fake
engine answers every request after `--delay` seconds (at most its max_num_seqs at once), for the
model and for the judge alike, so the phases' lengths are known and the placements' walls can
be compared: after generation (the sum of the phases) against side by side (the longer phase and
the last answers' judging). Each job is `evalpipe submit --preset tiny_random --cluster local
--backend fake --tasks judge:FILE --judge tiny_random --judge-placement P --wait` on a judged
task this script writes. The placements alternate across repetitions; medians are printed.

While a job runs, this script samples every process of the job's runner (every `evalpipe run`
whose command line names the job's run directory) each `--interval` seconds: its pid, its phase
(generate, judge, or the parent: after generation it only waits, side by side it generates) and
its RSS from /proc. Generation ends when its process is gone (after), or at the last answer's
write (side by side). The table says whether the generation's process was gone before the
judge's started (its memory returned whatever the engine keeps), how long both phases ran at
once, and the tree's peak RSS in each phase. Both placements' judgments must be the same.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from benchlib import REPO, child_env, interleave, load_average, machine, median, parse_args

from evalpipe.rundir.judgments import JudgeDir, read_judge_summary
from evalpipe.rundir.layout import RunDir

PLACEMENTS = ("after", "side-by-side")
QUICK = {"samples": 4, "delay": 0.05, "reps": 1}
TEMPLATE = "Question: {question}\nAnswer: {answer}\nRate the answer from 1 to 10 as [[n]]."


def write_task(folder: Path, samples: int) -> Path:
    """A judged task of `samples` one-turn questions."""
    rows = [{"id": str(i), "question": f"What is {i} plus {i}?"} for i in range(samples)]
    (folder / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = folder / "sums.yaml"
    task.write_text(
        "name: sums_judged\ndata: sums.jsonl\nsampling: {max_tokens: 16}\njudge:\n"
        "  system_prompt: You grade answers.\n"
        f"  template: {json.dumps(TEMPLATE)}\n  parser: rating\n"
    )
    return task


@dataclass
class Sample:
    t: float
    pid: int
    phase: str
    rss_mb: float


@dataclass
class Tree:
    """The sampled process tree of one job's runner."""

    samples: list[Sample] = field(default_factory=list)

    def phase(self, name: str) -> list[Sample]:
        return [s for s in self.samples if s.phase == name]

    def span(self, name: str) -> tuple[float, float] | None:
        seen = self.phase(name)
        return (seen[0].t, seen[-1].t) if seen else None

    def processes(self) -> str:
        """Each process of the tree: its phase and its own peak RSS."""
        peaks: dict[tuple[int, str], float] = {}
        for s in self.samples:
            peaks[(s.pid, s.phase)] = max(peaks.get((s.pid, s.phase), 0.0), s.rss_mb)
        return ", ".join(f"{phase} {mb:.0f}" for (_, phase), mb in peaks.items())

    def peak_mb(self, during: tuple[float, float] | None) -> float:
        """The tree's largest summed RSS at one sampling instant within `during`."""
        if during is None:
            return 0.0
        totals: dict[float, float] = {}
        for s in self.samples:
            if during[0] <= s.t <= during[1]:
                totals[s.t] = totals.get(s.t, 0.0) + s.rss_mb
        return max(totals.values(), default=0.0)


def _runner_processes(run_dir: str) -> list[tuple[int, str, float]]:
    """(pid, phase, RSS MB) of every `evalpipe run` whose command line names `run_dir`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            status = (proc / "status").read_text()
        except OSError:
            continue  # ended meanwhile
        words = [a.decode(errors="replace") for a in argv]
        if "run" not in words or run_dir not in words or "evalpipe" not in words:
            continue
        phase = words[words.index("--phase") + 1] if "--phase" in words else "parent"
        rss = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")), 0)
        found.append((int(proc.name), phase, int(rss) / 1024))
    return found


def sample_tree(run_dir: str, interval: float, done: threading.Event, tree: Tree) -> None:
    while not done.is_set():
        now = time.time()  # the clock file times use: the last answer's write ends generation
        tree.samples += [
            Sample(now, pid, phase, rss) for pid, phase, rss in _runner_processes(run_dir)
        ]
        time.sleep(interval)


@dataclass(frozen=True)
class Job:
    placement: str
    wall_s: float  # the runner's process tree, first seen to last seen
    generate: tuple[float, float] | None
    judge: tuple[float, float] | None
    peak_generate_mb: float
    peak_judge_mb: float
    judgments: dict[str, object]
    script: str
    processes: str  # each process's phase and peak RSS MB


def run_job(placement: str, task: Path, folder: Path, args: argparse.Namespace) -> Job:
    out = folder / f"{placement}-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "evalpipe", "submit", "--preset", "tiny_random",
            "--cluster", "local", "--backend", "fake", "--tasks", f"judge:{task}",
            "--judge", "tiny_random", "--judge-placement", placement, "--out", str(out),
            "--wait", "--poll", "0.5"]  # fmt: skip
    tree, done = Tree(), threading.Event()
    sampler = threading.Thread(target=sample_tree, args=(str(out), args.interval, done, tree))
    sampler.start()
    try:
        env = child_env(EVALPIPE_FAKE_DELAY_S=str(args.delay))
        submitted = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    finally:
        done.set()
        sampler.join()
    if submitted.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)}:\n{submitted.stdout[-3000:]}{submitted.stderr[-3000:]}"
        )
    (judge_dir,) = (out / "judgments").iterdir()
    summary = read_judge_summary(JudgeDir(RunDir(out), judge_dir.name))
    rows = [json.loads(x) for x in (judge_dir / "judgments.jsonl").read_text().splitlines()]
    judgments = {r["sample_id"]: r["completions"][0] for r in rows}
    if len(judgments) != len(rows) or summary.judgments != args.samples:
        raise RuntimeError(f"{placement}: {len(rows)} judgments for {args.samples} answers")
    everything = (tree.samples[0].t, tree.samples[-1].t) if tree.samples else (0.0, 0.0)
    judging = tree.span("judge")
    if placement == "side-by-side":  # the generating process then waits for the judge
        start = tree.span("parent")
        generating = None if start is None else (start[0], (out / "samples.jsonl").stat().st_mtime)
    else:
        generating = tree.span("generate")
    return Job(
        placement=placement,
        wall_s=everything[1] - everything[0],
        generate=generating,
        judge=judging,
        peak_generate_mb=tree.peak_mb(generating),
        peak_judge_mb=tree.peak_mb(judging),
        judgments=judgments,
        script=(out / "job.sbatch").read_text(),
        processes=tree.processes(),
    )


def _overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> float:
    if a is None or b is None:
        return 0.0
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64, help="questions, one judgment each")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds per fake request")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between RSS samples")
    args = parse_args(parser, QUICK, argv)
    if shutil.which("sbatch") is None:
        print("SLURM is not installed: run scripts/setup.sh, then scripts/local-slurm.sh start")
        return 1
    print(f"machine: {machine()}; {load_average()} (shared: walls are noisy, ratios less so)")
    (REPO / ".cache").mkdir(exist_ok=True)  # the jobs must see it: not a node-local /tmp
    folder = Path(tempfile.mkdtemp(prefix="judge-placement-", dir=REPO / ".cache"))
    try:
        task = write_task(folder, args.samples)
        jobs = interleave(
            {p: (lambda p=p: run_job(p, task, folder, args)) for p in PLACEMENTS}, args.reps
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    after, side = jobs["after"], jobs["side-by-side"]
    same = all(j.judgments == after[0].judgments for j in after + side)
    print(f"\n{args.samples} samples, {args.delay:g} s per fake request, {args.reps} rep(s)")
    print(
        "placement     | job GPUs | runner wall s | generation s | judge process s "
        "| both at once s | judging after generation s | peak RSS MB generating "
        "| peak RSS MB judging | generation process gone before judge"
    )
    for name, runs in jobs.items():
        gres = next(line for line in runs[0].script.splitlines() if "--gres" in line)
        gone = all(j.generate and j.judge and j.generate[1] < j.judge[0] for j in runs)
        gone = gone and name == "after"  # side by side the generating process outlives it
        print(
            f"{name:13} | {gres.rsplit(':', 1)[1]:8} "
            f"| {median([j.wall_s for j in runs]):13.1f} "
            f"| {median([_length(j.generate) for j in runs]):12.1f} "
            f"| {median([_length(j.judge) for j in runs]):15.1f} "
            f"| {median([_overlap(j.generate, j.judge) for j in runs]):14.1f} "
            f"| {median([_tail(j) for j in runs]):26.1f} "
            f"| {median([j.peak_generate_mb for j in runs]):22.0f} "
            f"| {median([j.peak_judge_mb for j in runs]):19.0f} "
            f"| {'yes' if gone else 'no'}"
        )
    print("\nprocesses of each job (phase and peak RSS MB; parent: the runner, which waits after "
          "generation and generates side by side):")  # fmt: skip
    for job in after + side:
        print(f"  {job.placement}: {job.processes}")
    ratio = median([j.wall_s for j in side]) / median([j.wall_s for j in after])
    print(f"\nwall side by side / after: {ratio:.2f}")
    print(f"judgments equal in both placements: {'yes' if same else 'NO'}")
    return 0 if same else 1


def _tail(job: Job) -> float:
    """Seconds the judge ran on once generation had ended."""
    if job.generate is None or job.judge is None:
        return 0.0
    return max(0.0, job.judge[1] - max(job.generate[1], job.judge[0]))


def _length(span: tuple[float, float] | None) -> float:
    return 0.0 if span is None else span[1] - span[0]


if __name__ == "__main__":
    sys.exit(main())
