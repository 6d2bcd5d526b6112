"""The streaming runner against the workloads users have: long-tailed completion lengths over
many tasks, stop latency, kill -9 losses, and data-parallel replicas.

    python bench/stream.py                                     # all three (about 30 min)
    python bench/stream.py drain [--prompts 1024] [--reps 3]   # batch drain vs raw vLLM
    python bench/stream.py stop                                # SIGUSR1 latency, kill -9 loss
    python bench/stream.py replicas [--reps 2]                 # dispatcher, CPU replicas
    python bench/stream.py [drain|stop|replicas] --quick       # tiny sizes, once: does it work

drain: SmolLM2-135M on the CPU engine; prompts whose completion lengths are long-tailed
(Pareto, median ~28, max 512 tokens; forced with ignore_eos), grouped by length into tasks (a
run of many tasks). In one process per repetition, the same loaded engine runs the same prompts
in the same order three ways: one raw `LLM.chat` call over all of them (the ideal), raw calls in
chunks of 256 (what evalpipe's first runner did), and evalpipe's runner (streaming loop, scoring,
samples.jsonl, manifest). Figures are medians over repetitions whose side order rotates.

stop: tiny_random generating 512-token completions through `run_evaluation` under the real
signal handling: seconds from SIGUSR1 to exit 75 with requests in flight; and after kill -9,
whether every line written before the kill is still there and how many samples a resume redoes.

replicas: (a) the dispatcher alone: 8 fake-engine replica processes of fixed per-request
latency against the ideal 8× throughput; (b) this machine: 2 CPU replicas × 1 core against
1 replica × 2 cores, SmolLM2 on 256 long-tailed prompts.

--quick: one repetition of each at tiny sizes; drain on tiny_random (a few prompts of at most 16
tokens), stop and the CPU replicas on the fake engine (each stop-test request takes 0.25 s, so
requests are in flight when the signal comes), 320 requests through the dispatcher.
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import QUICK_PRESET, REPO, VLLM_ENV, child_env, load_average, machine, median

LENGTHS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
DRAIN_TARGET = 1.03
STOP_TARGET_S = 5.0
DISPATCH_TARGET = 0.95
FAKE_DELAY_S = 0.25  # per request, for stop on the fake engine: something is always in flight
QUICK = {
    "drain": {"preset": QUICK_PRESET, "prompts": 8, "reps": 1, "max_tokens": 16},
    "stop": {"reps": 1, "in_flight_s": 1.0, "backend": "fake"},
    "replicas": {
        **{"preset": QUICK_PRESET, "prompts": 8, "reps": 1, "max_tokens": 32, "samples": 320},
        "backend": "fake",
    },
}
QUICK_HELP = "; ".join(
    f"{name} " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in sizes.items())
    for name, sizes in QUICK.items()
)


@dataclass(frozen=True, kw_only=True)
class LengthTask:
    """Questions whose answers are forced to `max_tokens` tokens; scoring is trivial."""

    name: str
    category: str
    prompts: tuple[str, ...]
    max_tokens: int
    sampling: Any = field(default=None)

    def __post_init__(self) -> None:
        from evalpipe.records.sampling import SamplingSettings

        sampling = SamplingSettings(max_tokens=self.max_tokens, ignore_eos=True)
        object.__setattr__(self, "sampling", sampling)

    def definition(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "prompts": len(self.prompts)}

    def samples(self, limit: int | None = None) -> list[Any]:
        from evalpipe.tasks.base import Sample

        prompts = self.prompts[:limit] if limit else self.prompts
        return [Sample(id=f"{self.name}-{i}", prompt=p, target="") for i, p in enumerate(prompts)]

    def score_many(self, items: Sequence[tuple[Any, Sequence[str]]]) -> list[Any]:
        from evalpipe.tasks.base import Scored

        return [Scored(extracted=(None,), scores={"accuracy": 0.0}) for _ in items]


def long_tailed_tasks(count: int, seed: int = 0, cap: int = 512) -> list[LengthTask]:
    """`count` prompts with Pareto-distributed answer lengths (median ~28, capped at `cap`),
    rounded up to LENGTHS and grouped into one task per length, tasks in a seeded order."""
    rng = random.Random(seed)
    groups: dict[int, list[str]] = {}
    for i in range(count):
        want = min(cap, int(14 * rng.paretovariate(1.0)) + 1)
        length = next(n for n in LENGTHS if n >= want)
        groups.setdefault(length, []).append(f"Write a long story about topic number {i}.")
    order = sorted(groups)
    rng.shuffle(order)
    return [
        LengthTask(name=f"len{n}", category=f"len{n}", prompts=tuple(groups[n]), max_tokens=n)
        for n in order
    ]


class KeepOpen:
    """The loaded engine, handed to the runner without letting it close it."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def close(self) -> None:
        pass


def _drain_child(preset_name: str, prompts: int, cap: int, order: list[str]) -> dict[str, float]:
    from vllm import SamplingParams

    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine
    from evalpipe.run.runner import RunOptions, run_evaluation

    preset = load_preset(preset_name)
    engine = VllmEngine.open(preset, EngineSettings())
    tasks = long_tailed_tasks(prompts, cap=cap)
    conversations = [[{"role": "user", "content": p}] for t in tasks for p in t.prompts]
    params = [
        SamplingParams(max_tokens=t.max_tokens, ignore_eos=True, temperature=0.0)
        for t in tasks
        for _ in t.prompts
    ]
    llm = engine._llm
    llm.chat(conversations[:8], params[:8], use_tqdm=False)  # warm-up, every side after it
    out: dict[str, float] = {}
    for side in order:
        t0 = time.perf_counter()
        if side == "raw":
            llm.chat(conversations, params, use_tqdm=False)
        elif side == "chunked":
            for start in range(0, len(params), 256):
                chunk = slice(start, start + 256)
                llm.chat(conversations[chunk], params[chunk], use_tqdm=False)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                run_evaluation(
                    lambda settings: KeepOpen(engine),
                    tasks,
                    Path(tmp) / "run",
                    preset=preset,
                    options=RunOptions(backend="vllm"),
                )
                manifest = json.loads((Path(tmp) / "run" / "manifest.json").read_text())
                generate = sum(v for k, v in manifest["timings"].items() if k.startswith("gen"))
        out[side] = time.perf_counter() - t0
        if side == "evalpipe":
            out["evalpipe_generate"] = generate
    return out


def drain(args: argparse.Namespace) -> int:
    sides = ["raw", "chunked", "evalpipe"]
    tasks = long_tailed_tasks(args.prompts, cap=args.max_tokens)
    tokens = sum(t.max_tokens * len(t.prompts) for t in tasks)
    print(f"# batch drain: {args.prompts} prompts in {len(tasks)} tasks, {tokens} tokens forced")
    print(f"# {machine()}\n# start: {load_average()}")
    results: dict[str, list[float]] = {s: [] for s in [*sides, "evalpipe_generate"]}
    for rep in range(args.reps):
        order = sides[rep % 3 :] + sides[: rep % 3]
        argv = [sys.executable, __file__, "_drain", args.preset, str(args.prompts)]
        argv += [str(args.max_tokens), ",".join(order)]
        done = subprocess.run(
            argv, env=child_env(**VLLM_ENV), capture_output=True, text=True, cwd=REPO
        )
        if done.returncode:
            raise RuntimeError(done.stderr[-3000:])
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  rep {rep + 1}: {figures}", file=sys.stderr, flush=True)
        for key, value in figures.items():
            results[key].append(value)
    raw = median(results["raw"])
    ratio = median(
        [e / r for e, r in zip(results["evalpipe_generate"], results["raw"], strict=True)]
    )
    chunked = median([c / r for c, r in zip(results["chunked"], results["raw"], strict=True)])
    print("| side | median s | per-rep s |\n|---|---|---|")
    for key in ("raw", "chunked", "evalpipe_generate", "evalpipe"):
        print(f"| {key} | {median(results[key]):.1f} | {[round(x, 1) for x in results[key]]} |")
    print(f"\nraw single LLM.chat: {raw:.1f} s ({tokens / raw:.0f} tok/s)")
    verdict = "meets" if ratio <= DRAIN_TARGET else "MISSES"
    print(f"evalpipe generation phase / raw: {ratio:.3f}× ({verdict} ≤ {DRAIN_TARGET})")
    print(f"chunks of 256 / raw (the first runner): {chunked:.3f}×")
    print(f"# end: {load_average()}")
    return 0


# -- stop latency and kill -9 ----------------------------------------------------------------


def _stop_child(out: str, prompts: int, backend: str) -> int:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.factory import open_engine
    from evalpipe.run.runner import RunOptions, run_evaluation
    from evalpipe.rundir.checkpoint import StopOnSignal

    preset = load_preset("tiny_random")
    task = LengthTask(
        name="long", category="long", prompts=tuple(f"Story {i}." for i in range(prompts)),
        max_tokens=512,
    )  # fmt: skip
    with StopOnSignal() as stop:
        result = run_evaluation(
            lambda settings: open_engine(backend, preset, settings),
            [task],
            Path(out),
            preset=preset,
            options=RunOptions(backend=backend, window=32),
            stop=stop,
        )
    return result.exit_status


def _generating(out: Path) -> bool:
    manifest = out / "manifest.json"
    try:
        return "load" in json.loads(manifest.read_text())["timings"]
    except (OSError, ValueError, KeyError):
        return False


def _lines(out: Path) -> int:
    path = out / "samples.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def stop(args: argparse.Namespace) -> int:
    from evalpipe.catalog import weights
    from evalpipe.engine.fake import DELAY_ENV

    weights.prepare("tiny_random")
    env = child_env(**VLLM_ENV, **{DELAY_ENV: str(FAKE_DELAY_S)})
    print(f"# stop latency and kill -9 ({args.backend} engine, tiny_random, 512-token completions, "
          "window 32)")  # fmt: skip
    print(f"# {machine()}\n# start: {load_average()}")
    latencies = []
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            argv = [sys.executable, __file__, "_stop", str(out), "400", args.backend]
            proc = subprocess.Popen(argv, env=env, cwd=REPO, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            while not _generating(out):
                if proc.poll() is not None:
                    raise RuntimeError(f"the run exited {proc.returncode}: {proc.stderr.read()}")
                time.sleep(0.05)
            time.sleep(args.in_flight_s + rep)  # long completions in flight
            t0 = time.perf_counter()
            proc.send_signal(signal.SIGUSR1)
            proc.communicate(timeout=120)
            latencies.append(time.perf_counter() - t0)
            assert proc.returncode == 75, proc.returncode
    worst = max(latencies)
    verdict = "meets" if worst <= STOP_TARGET_S else "MISSES"
    print(f"SIGUSR1 → exit 75: {[round(x, 2) for x in latencies]} s; worst {worst:.2f} s "
          f"({verdict} ≤ {STOP_TARGET_S} s)")  # fmt: skip
    for rep in range(args.reps):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "run"
            argv = [sys.executable, __file__, "_stop", str(out), "400", args.backend]
            quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
            proc = subprocess.Popen(argv, env=env, cwd=REPO, **quiet)
            while _lines(out) < 20 + 20 * rep:
                if proc.poll() is not None:
                    raise RuntimeError(f"the run exited {proc.returncode} before the kill")
                time.sleep(0.01)
            before = _lines(out)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            after = _lines(out)
            print(f"kill -9 after {before} lines on disk: {after} lines after the kill "
                  f"({before - min(before, after)} written lines lost)")  # fmt: skip
    print(f"# end: {load_average()}")
    return 0


# -- replicas -----------------------------------------------------------------------------------


def _dispatch(replicas: int, samples: int, delay: float) -> float:
    """Seconds to stream `samples` through `replicas` fake-engine processes (8 seqs each)."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.run.replicas import ReplicaPool
    from evalpipe.run.runner import RunOptions, run_evaluation

    os.environ["EVALPIPE_FAKE_DELAY_S"] = str(delay)
    preset = load_preset("tiny_random")
    task = LengthTask(
        name="q", category="q", prompts=tuple(f"q{i}" for i in range(samples)), max_tokens=4
    )
    envs = [{"EVALPIPE_REPLICA": str(i)} for i in range(replicas)]
    pool = ReplicaPool.start("fake", preset, EngineSettings(), envs)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_evaluation(
            lambda settings: pool,
            [task],
            Path(tmp) / "run",
            preset=preset,
            options=RunOptions(backend="fake", replicas=replicas),
        )
        return time.perf_counter() - t0


def _cpu_replicas_child(
    preset_name: str, backend: str, replicas: int, prompts: int, cap: int
) -> float:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.factory import open_engine
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.run.replicas import ReplicaPool, core_slices
    from evalpipe.run.runner import RunOptions, run_evaluation

    preset = load_preset(preset_name)
    settings = EngineSettings()
    if replicas == 1:
        engine = open_engine(backend, preset, settings)
    else:
        envs = core_slices(replicas, sorted(os.sched_getaffinity(0)))
        engine = ReplicaPool.start(backend, preset, settings, envs)
    with tempfile.TemporaryDirectory() as tmp:
        run_evaluation(
            lambda s: engine,
            long_tailed_tasks(prompts, seed=1, cap=cap),
            Path(tmp) / "run",
            preset=preset,
            options=RunOptions(backend=backend, replicas=replicas),
        )
        manifest = json.loads((Path(tmp) / "run" / "manifest.json").read_text())
    return sum(v for k, v in manifest["timings"].items() if k.startswith("generate"))


def replicas(args: argparse.Namespace) -> int:
    print(f"# replicas\n# {machine()}\n# start: {load_average()}")
    count, per, delay, samples = 8, 8, 0.1, args.samples
    ideal = samples / (count * per / delay)
    took = [_dispatch(count, samples, delay) for _ in range(args.reps)]
    ratio = ideal / median(took)
    verdict = "meets" if ratio >= DISPATCH_TARGET else "MISSES"
    print(f"dispatcher: {samples} requests, {count} fake replicas × {per} seqs × {delay} s: "
          f"{[round(t, 2) for t in took]} s against ideal {ideal:.2f} s → {ratio:.3f} of 8× "
          f"({verdict} ≥ {DISPATCH_TARGET})")  # fmt: skip
    from evalpipe.catalog import weights

    weights.prepare(args.preset)
    results: dict[int, list[float]] = {1: [], 2: []}
    for rep in range(args.reps):
        for n in (1, 2) if rep % 2 == 0 else (2, 1):
            argv = [sys.executable, __file__, "_cpu_replicas", args.preset, args.backend, str(n)]
            argv += [str(args.prompts), str(args.max_tokens)]
            done = subprocess.run(argv, env=child_env(**VLLM_ENV), cwd=REPO,
                                  capture_output=True, text=True)  # fmt: skip
            if done.returncode:
                raise RuntimeError(done.stderr[-3000:])
            results[n].append(float(done.stdout.strip().splitlines()[-1]))
    one, two = median(results[1]), median(results[2])
    print(f"{args.backend} engine, {args.prompts} long-tailed prompts, generation phase: "
          f"1 replica × 2 cores "
          f"{results[1]} s, 2 replicas × 1 core {results[2]} s → 2 replicas take "
          f"{two / one:.2f}× as long")  # fmt: skip
    print(f"# end: {load_average()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_drain":
        print(json.dumps(_drain_child(argv[1], int(argv[2]), int(argv[3]), argv[4].split(","))))
        return 0
    if argv and argv[0] == "_stop":
        return _stop_child(argv[1], int(argv[2]), argv[3])
    if argv and argv[0] == "_cpu_replicas":
        print(_cpu_replicas_child(argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])))
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="--quick (anywhere): " + QUICK_HELP
    )
    sub = parser.add_subparsers(dest="what")
    subs = {name: sub.add_parser(name) for name in QUICK}
    for name in ("drain", "replicas"):
        subs[name].add_argument("--preset", default="smollm2_135m", help="a preset with a recipe")
        subs[name].add_argument("--max-tokens", type=int, default=512, help="longest answer")
    subs["drain"].add_argument("--prompts", type=int, default=1024)
    subs["drain"].add_argument("--reps", type=int, default=3)
    subs["stop"].add_argument("--reps", type=int, default=3)
    subs["stop"].add_argument("--in-flight-s", type=float, default=3.0, help="before the signal")
    subs["replicas"].add_argument("--reps", type=int, default=2)
    subs["replicas"].add_argument("--prompts", type=int, default=256, help="CPU replicas' part")
    subs["replicas"].add_argument("--samples", type=int, default=4000, help="dispatcher's part")
    for name in ("stop", "replicas"):
        subs[name].add_argument("--backend", choices=("vllm", "fake"), default="vllm")
    if "--quick" in argv:
        argv = [a for a in argv if a != "--quick"]
        for name, sizes in QUICK.items():
            subs[name].set_defaults(**sizes)
        print(f"quick mode ({QUICK_HELP}): figures too small to judge", flush=True)
    args = parser.parse_args(argv)
    if args.what is None:  # all three, at their defaults (`make bench`)
        return max(
            f(parser.parse_args([name])) for name, f in (("drain", drain), ("stop", stop),
            ("replicas", replicas))
        )  # fmt: skip
    return {"drain": drain, "stop": stop, "replicas": replicas}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
