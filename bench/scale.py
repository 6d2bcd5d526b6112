"""Scale: planning + rendering 1,000 jobs, resuming a run of 100,000 recorded samples, and
`evalpipe report` over 1,000 run directories.

    python bench/scale.py [--reps 3] [--jobs 1000] [--samples 100000]
    python bench/scale.py --quick    # 20 jobs, 500 samples, 20 run directories, once

Each measurement runs in a fresh child process (this script with --child), so imports, caches
and peak memory belong to that measurement alone; the cases alternate and medians are printed.

- plan + render: `evalpipe.jobs.prepare.prepare` per job (load preset and cluster YAML, plan,
  build the JobSpec, render the sbatch script and, for arrays, the merge script), cycling through
  every shipped preset × cluster pair that fits, with 1–4 shards. Also the same jobs from preset,
  cluster and GPU objects loaded once (`jobspec.make_jobspec` + `render.render_job`), which
  separates planning and rendering from reading configuration.
- resume: a run of a task with 100,250 tiny samples is stopped after 100,000 (the runner's own
  stop flag, which aborts what is in flight), then resumed with the runner (`run_evaluation`,
  fake engine): it reads and checks the checkpoint, generates the last 250 samples and writes
  the summary. Time and peak RSS of that process; and the checkpoint read alone
  (`results.read_samples`) with its tracemalloc peak.
- report: bench/report_scale.py (1,000 synthetic run directories, `evalpipe report`).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchlib import (
    REPO,
    child_env,
    interleave,
    json_child,
    load_average,
    machine,
    median,
    parse_args,
    spread,
    verdict,
)

from evalpipe.engine.protocol import EngineSettings  # light: no vLLM, no torch
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.base import Sample, Scored

if TYPE_CHECKING:
    from evalpipe.engine.fake import FakeEngine

PLAN_RENDER_TARGET_S = 2.0
RESUME_TARGET_S = 2.0
RESUME_TARGET_MB = 300.0
CHUNK = 250  # the runner's admission window for the resume workload
PENDING = 250  # samples left for the resumed run to generate


# ---- children: each prints one JSON object ----


def _fitting_pairs() -> list[tuple[str, str]]:
    """Every shipped (preset, cluster) pair whose plan fits the cluster's nodes."""
    from evalpipe.catalog.configpath import names
    from evalpipe.catalog.preset import preset_names
    from evalpipe.core.errors import EvalpipeError
    from evalpipe.jobs.jobspec import JobOptions
    from evalpipe.jobs.prepare import prepare

    pairs = []
    for cluster in names("clusters"):
        for preset in preset_names():
            try:
                prepare(preset, cluster, JobOptions(), Path("/nonexistent/run"))
            except EvalpipeError:
                continue  # does not fit that site: the planner's refusal, not a job
            pairs.append((preset, cluster))
    return pairs


def child_plan_render(n: int, preloaded: bool) -> dict:
    t0 = time.perf_counter()
    from evalpipe.catalog.clusters import load_cluster
    from evalpipe.catalog.gpus import load_gpus
    from evalpipe.catalog.preset import load_preset
    from evalpipe.jobs import sbatchrender
    from evalpipe.jobs.jobspec import JobOptions, make_jobspec
    from evalpipe.jobs.prepare import prepare

    imported = time.perf_counter() - t0
    pairs = _fitting_pairs()
    jobs = [(*pairs[i % len(pairs)], 1 + i % 4) for i in range(n)]  # 1-4 shards
    run_dirs = [f"/scratch/evalpipe/results/job-{i:05d}" for i in range(n)]
    t1, c1 = time.perf_counter(), time.process_time()
    if preloaded:
        presets = {p: load_preset(p) for p in {p for p, _, _ in jobs}}
        clusters = {c: load_cluster(c) for c in {c for _, c, _ in jobs}}
        gpus = load_gpus()
        for (preset, cluster, shards), run_dir in zip(jobs, run_dirs, strict=True):
            site = clusters[cluster]
            spec = make_jobspec(
                preset=presets[preset],
                preset_ref=preset,
                cluster=site,
                gpu=gpus[site.gpu],
                options=JobOptions(shards=shards),
                run_dir=run_dir,
            )
            sbatchrender.render_job(spec)
            if spec.options.shards > 1:
                sbatchrender.render_merge(spec)
    else:
        for (preset, cluster, shards), run_dir in zip(jobs, run_dirs, strict=True):
            prepare(preset, cluster, JobOptions(shards=shards), Path(run_dir))
    return {
        "import_s": imported,
        "jobs_s": time.perf_counter() - t1,
        "jobs_cpu_s": time.process_time() - c1,
        "pairs": len(pairs),
    }


TINY_SAMPLING = SamplingSettings(max_tokens=8)


@dataclass(frozen=True)
class TinyTask:
    """A task of `n` one-line arithmetic samples, the smallest records a real run writes."""

    n: int
    name: str = "bench_tiny"
    category: str = "bench"
    sampling: SamplingSettings = TINY_SAMPLING

    def samples(self, limit: int | None = None) -> list[Sample]:
        count = self.n if limit is None else min(limit, self.n)
        return [Sample(id=str(i), prompt=f"{i} % 10 = ?", target=str(i % 10)) for i in range(count)]

    def definition(self) -> dict[str, Any]:
        return {"n": self.n, "name": self.name}

    def score(self, sample: Sample, texts: Sequence[str]) -> Scored:
        answers = tuple(t.rstrip(".")[-1:] or None for t in texts)
        return Scored(extracted=answers, scores={"accuracy": float(answers[0] == sample.target)})

    def score_many(self, items: Sequence[tuple[Sample, Sequence[str]]]) -> list[Scored]:
        return [self.score(sample, texts) for sample, texts in items]


class StopAfterServed:
    """The runner's stop flag, raised once the engine has generated for `n` prompts (as a
    SIGUSR1 arriving then would be): the runner aborts what is in flight and stops."""

    def __init__(self, engines: list[FakeEngine], n: int | None) -> None:
        self.engines = engines
        self.n = n

    @property
    def requested(self) -> str | None:
        served = sum(len(e.served) for e in self.engines)
        return "bench" if self.n is not None and served >= self.n else None


def _run(out: Path, n_samples: int, stop_after: int | None) -> str:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.fake import FakeEngine
    from evalpipe.run.runner import RunOptions, run_evaluation

    preset = load_preset("tiny_random")
    engines: list[FakeEngine] = []

    def open_engine(settings: EngineSettings) -> FakeEngine:
        engines.append(FakeEngine(preset, settings))
        return engines[-1]

    result = run_evaluation(
        open_engine,
        [TinyTask(n_samples)],
        out,
        preset=preset,
        options=RunOptions(backend="fake", window=CHUNK),
        stop=StopAfterServed(engines, stop_after),
    )
    return result.status


def child_write_run(out: Path, recorded: int) -> dict:
    t0 = time.perf_counter()
    status = _run(out, recorded + PENDING, recorded)
    return {"status": status, "wall_s": time.perf_counter() - t0}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child_resume(out: Path, recorded: int) -> dict:

    base = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    status = _run(out, recorded + PENDING, None)
    return {
        "status": status,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "peak_rss_mb": _rss_mb(),
        "rss_growth_mb": _rss_mb() - base,
    }


def child_read(out: Path) -> dict:
    import tracemalloc

    from evalpipe.rundir.layout import SAMPLES
    from evalpipe.rundir.samplelog import check_unique, read_samples

    path = out / SAMPLES
    t0, c0 = time.perf_counter(), time.process_time()
    records = read_samples(path).records
    check_unique(records, path)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rss = _rss_mb()
    del records
    tracemalloc.start()
    records = read_samples(path).records
    _, peak = tracemalloc.get_traced_memory()
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "records": len(records),
        "tracemalloc_peak_mb": peak / 2**20,
        "file_mb": path.stat().st_size / 2**20,
        "peak_rss_mb": rss,
    }


CHILDREN = {
    "plan-render": lambda a: child_plan_render(int(a[0]), a[1] == "preloaded"),
    "write-run": lambda a: child_write_run(Path(a[0]), int(a[1])),
    "resume": lambda a: child_resume(Path(a[0]), int(a[1])),
    "read": lambda a: child_read(Path(a[0])),
}


# ---- parent ----


def spawn(*args: str) -> dict:
    return json_child([sys.executable, str(Path(__file__).resolve()), "--child", *args])


def bench_plan_render(jobs: int, reps: int) -> None:
    print(f"\n## Planning + rendering {jobs:,} jobs (one process per repetition)")
    runs = interleave(
        {
            "prepare per job": lambda: spawn("plan-render", str(jobs), "api"),
            "configs loaded once": lambda: spawn("plan-render", str(jobs), "preloaded"),
        },
        reps,
    )
    for name, results in runs.items():
        loop = [r["jobs_s"] for r in results]
        imports = [r["import_s"] for r in results]
        total = median(loop) + median(imports)
        print(
            f"{name:<24} jobs: {spread(loop)} s wall = {median(loop) / jobs * 1000:.2f} ms/job "
            f"(CPU {median([r['jobs_cpu_s'] for r in results]):.2f} s); imports "
            f"{median(imports):.3f} s; over {results[0]['pairs']} fitting preset × cluster pairs"
        )
        print(
            f"  target {jobs:,} jobs < {PLAN_RENDER_TARGET_S} s (imports + jobs): "
            f"{total:.2f} s, {verdict(total, PLAN_RENDER_TARGET_S)}"
        )


def bench_resume(recorded: int, reps: int) -> None:
    print(f"\n## Resuming a run with {recorded:,} recorded samples ({PENDING} left to run)")
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-scale-") as tmp:
        stopped = Path(tmp) / "stopped"
        written = spawn("write-run", str(stopped), str(recorded))
        lines = (stopped / "samples.jsonl").read_bytes().count(b"\n")
        print(
            f"writing it (fake engine, a window of {CHUNK}, group fsync): "
            f"{written['wall_s']:.2f} s, status {written['status']}, {lines:,} lines"
        )
        counter = iter(range(reps * 2))

        def resume() -> dict:
            copy = Path(tmp) / f"resume-{next(counter)}"
            shutil.copytree(stopped, copy)
            result = spawn("resume", str(copy), str(recorded))
            shutil.rmtree(copy)
            return result

        runs = interleave({"resume": resume, "read": lambda: spawn("read", str(stopped))}, reps)
    res, read = runs["resume"], runs["read"]
    wall = median([r["wall_s"] for r in res])
    rss = median([r["peak_rss_mb"] for r in res])
    print(
        f"resume (run_evaluation to complete): {spread([r['wall_s'] for r in res])} s wall, "
        f"CPU {median([r['cpu_s'] for r in res]):.2f} s, peak RSS {rss:.0f} MB (grew "
        f"{median([r['rss_growth_mb'] for r in res]):.0f} MB after imports), status "
        f"{res[0]['status']}"
    )
    print(
        f"checkpoint read alone (read_samples + check_unique): "
        f"{spread([r['wall_s'] for r in read])} s wall, CPU "
        f"{median([r['cpu_s'] for r in read]):.2f} s, {read[0]['records']:,} records from "
        f"{read[0]['file_mb']:.1f} MB; peak RSS {median([r['peak_rss_mb'] for r in read]):.0f} MB, "
        f"tracemalloc peak {read[0]['tracemalloc_peak_mb']:.0f} MB"
    )
    print(f"  target resume < {RESUME_TARGET_S} s: {wall:.2f} s, {verdict(wall, RESUME_TARGET_S)}")
    print(
        f"  target resume peak < {RESUME_TARGET_MB:.0f} MB: {rss:.0f} MB, "
        f"{verdict(rss, RESUME_TARGET_MB)}"
    )


def bench_report(quick: bool) -> None:
    print("\n## Report over 1,000 run directories (bench/report_scale.py)")
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "report_scale.py"), *(["--quick"] if quick else [])],
        env=child_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    print(done.stdout.rstrip())
    if done.returncode != 0:
        raise RuntimeError(f"report_scale.py exited {done.returncode}:\n{done.stderr[-2000:]}")


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(CHILDREN[sys.argv[2]](sys.argv[3:])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100_000, help="a multiple of 250")
    args = parse_args(parser, {"reps": 1, "jobs": 20, "samples": 2 * CHUNK})
    if args.samples % CHUNK:
        parser.error(f"--samples must be a multiple of {CHUNK}")
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    bench_plan_render(args.jobs, args.reps)
    bench_resume(args.samples, args.reps)
    bench_report(args.quick)
    print(f"at end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
