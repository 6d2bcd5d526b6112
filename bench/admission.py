"""Longest-first admission against one raw `LLM.chat` call on long-tailed work, and no loss on
uniform short work.

    python bench/admission.py [--seqs 64,256] [--reps 3] [--prompts 1024] [--kv-gib 1]
    python bench/admission.py --quick                                         # seconds

Workload: `--prompts` prompts in 4 tasks (max_tokens = `--max-tokens`), each answer forced to
its own long-tailed length (Pareto, median ~28, capped at `--max-tokens`; `ignore_eos`, the
length set per request by a wrapper around the loaded engine, so every side generates exactly
the same tokens). The lengths are predicted from a past run of a DIFFERENT preset
(`--past-preset`, run once for real into the work folder) whose recorded lengths are this
workload's × 1.5 × log-normal noise (σ 0.35): a more verbose model that disagrees per sample.

Four sides per repetition and `max_num_seqs`: raw, one `LLM.chat` over all prompts in the given
order; evalpipe's runner with the past run (predicted, longest first); with the true lengths as
the past (oracle); with no past run (no prediction: the given order). Each side runs in a
process of its own with its own engine (so `--kv-gib` is held four times), and the four take
turns of about a second of engine steps (bench/lockstep.py): a slow spell of a shared machine
falls on all of them alike, and each side's seconds are its own, its waits for turns left out.
Ratios are each evalpipe generation phase over raw, per repetition, then the median. After its
side the raw process times decode steps at a few batch sizes for the simulator. With the largest
`max_num_seqs`, repetitions of the uniform case come first: `--uniform` short prompts (32 forced
tokens each) raw, through evalpipe in the given order, in the given order again (the noise
between identical sides) and longest first, four sides in lockstep, started together, each
running the work UNIFORM_ROUNDS times. Each repetition's figures are appended to
`--work`/results.jsonl; a rerun adds repetitions until `--reps` of each case are there
(`--uniform-reps` of the uniform case; so the bench runs in chunks) and prints the table of all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchlib import (
    QUICK_PRESET,
    REPO,
    VLLM_ENV,
    child_env,
    load_average,
    machine,
    median,
    parse_args,
    verdict,
)
from lockstep import QUANTUM_S, Turns, run_sides
from stream import KeepOpen, LengthTask

TARGETS = {64: 0.90, 256: 0.97}  # evalpipe predicted / raw, per max_num_seqs
UNIFORM_TOKENS = 32
# Runs of the uniform work per side and repetition (their seconds summed): one run takes about
# ten seconds, the length of ten turns, so one run's figure moves by a tenth with where the turns
# fall.
UNIFORM_ROUNDS = 5
PROBE_TOKENS = 64
# "Within noise" for longest first / given on uniform work: this, or as far as the given order
# run twice (uniform_again / uniform_given) strays in the same repetitions, whichever is wider.
UNIFORM_NOISE = 0.03
SIDES = ("raw", "predicted", "oracle", "none")
# uniform_again: the given order again, a side of its own, to measure what identical sides differ
UNIFORM_SIDES = ("uniform_raw", "uniform_given", "uniform_again", "uniform_longest")
# Each side's admission policy in evalpipe's manifest (raw: not evalpipe).
POLICIES = {
    **{"raw": None, "predicted": "longest-first", "oracle": "longest-first", "none": "given"},
    **{"uniform_raw": None, "uniform_given": "given", "uniform_again": "given"},
    **{"uniform_longest": "longest-first"},
}
TAILED, UNIFORM = "tailed", "uniform"  # a repetition's case
# results.jsonl rows measured this way (older: a fixed order, one step a turn, or one engine)
METHOD = f"lockstep {QUANTUM_S:g} s, shuffled"
TASKS = 4
DEFAULT_KV_GIB = int(VLLM_ENV["VLLM_CPU_KVCACHE_SPACE"])  # the bench environment's CPU KV cache
QUICK = {
    "preset": QUICK_PRESET,
    "past_preset": QUICK_PRESET,
    "prompts": 12,
    "max_tokens": 8,
    "seqs": "4",
    "reps": 1,
    "uniform": 4,
}


def workload(prompts: int, cap: int, seed: int = 0) -> tuple[list[LengthTask], dict[str, int]]:
    """The tasks (each sample's prompt names its topic) and each prompt's forced length."""
    rng = random.Random(seed)
    lengths: dict[str, int] = {}
    by_task: list[list[str]] = [[] for _ in range(TASKS)]
    for i in range(prompts):
        prompt = f"Write a long story about topic number {i}."
        lengths[prompt] = min(cap, int(14 * rng.paretovariate(1.0)) + 1)
        by_task[i % TASKS].append(prompt)
    tasks = [
        LengthTask(name=f"story{t}", category="story", prompts=tuple(p), max_tokens=cap)
        for t, p in enumerate(by_task)
    ]
    return tasks, lengths


def uniform_work(prompts: int, preset: str) -> tuple[list[LengthTask], dict[str, int], Any]:
    """The uniform case: `prompts` short prompts in TASKS tasks, each forced to UNIFORM_TOKENS,
    and a past run of `preset` predicting that same length for all (longest first then orders
    them by prompt length)."""
    from evalpipe.estimate.lengths import PastLengths

    tasks, _ = workload(prompts, UNIFORM_TOKENS)
    equal = PastLengths(
        run="uniform",
        preset=preset,
        backend="vllm",
        tasks={t.name: {s.id: UNIFORM_TOKENS for s in t.samples()} for t in tasks},
    )
    return tasks, {p: UNIFORM_TOKENS for t in tasks for p in t.prompts}, equal


def past_lengths(lengths: dict[str, int], cap: int, seed: int = 1) -> dict[str, int]:
    """What a more verbose, disagreeing model answered: × 1.5 × log-normal noise."""
    rng = random.Random(seed)
    return {p: max(1, min(2 * cap, round(n * 1.5 * math.exp(rng.gauss(0, 0.35))))) for p, n in
            lengths.items()}  # fmt: skip


class Forced(KeepOpen):
    """The loaded engine with every request's length forced to its prompt's (ignore_eos)."""

    def __init__(self, engine: Any, lengths: dict[str, int]) -> None:
        super().__init__(engine)
        self.lengths = lengths

    def add(self, requests: Sequence[Any]) -> None:
        self.engine.add(
            [
                dataclasses.replace(
                    r, sampling=dataclasses.replace(r.sampling, max_tokens=self.lengths[r.prompt])
                )
                for r in requests
            ]
        )


def _open(preset_name: str, seqs: int | None) -> tuple[Any, Any]:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine

    preset = load_preset(preset_name)
    if seqs is not None:
        kwargs = {**preset.engine_kwargs, "max_num_seqs": seqs}
        preset = dataclasses.replace(preset, engine_kwargs=kwargs)
    return preset, VllmEngine.open(preset, EngineSettings())


def _evalpipe(
    engine: Any, preset: Any, tasks: list[LengthTask], lengths: dict[str, int], **options: Any
) -> dict[str, Any]:
    """One run through evalpipe's runner; its generation phase, occupancy and admission."""
    from evalpipe.run.runner import RunOptions, run_evaluation

    past = options.pop("past", ())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        result = run_evaluation(
            lambda settings: Forced(engine, lengths),
            tasks,
            out,
            preset=preset,
            options=RunOptions(backend="vllm", **options),
            past=past,
        )
        manifest = json.loads((out / "manifest.json").read_text())
    occupancy = result.summary.occupancy
    return {
        "generate_s": sum(v for k, v in manifest["timings"].items() if k.startswith("generate")),
        "policy": manifest["admission"]["policy"],
        "tail_share": None if occupancy is None else occupancy.tail_share,
        "tokens": result.summary.throughput.generated_tokens,
    }


def _past_run(args: argparse.Namespace, out: Path) -> None:
    """The past run of the other preset, for real, with its own (more verbose) lengths; its
    engine is closed before the measured one is built in the same process."""
    from evalpipe.run.runner import RunOptions, run_evaluation

    tasks, lengths = workload(args.prompts, args.max_tokens)
    preset, engine = _open(args.past_preset, None)
    run_evaluation(
        lambda settings: Forced(engine, past_lengths(lengths, args.max_tokens)),
        tasks,
        out,
        preset=preset,
        options=RunOptions(backend="vllm", admission="given"),
    )
    engine.close()


def _preemption_counter(engine: Any) -> Callable[[], int]:
    """How many times vLLM's scheduler has preempted a sequence in this engine so far (KV
    cache full: the sequence's blocks are freed and it is computed again later)."""
    scheduler = engine._scheduler()
    preempt, count = scheduler._preempt_request, [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return preempt(*args, **kwargs)

    scheduler._preempt_request = counted
    return lambda: count[0]


def case_of(row: dict[str, Any]) -> str:
    """A row's case (rows from before the uniform case had its own repetitions: tailed)."""
    return str(row.get("case", TAILED))


def sides_of(case: str) -> tuple[str, ...]:
    return SIDES if case == TAILED else UNIFORM_SIDES


def rounds(case: str) -> int:
    """Runs of its work each side of a `case` repetition makes, its seconds their sum."""
    return UNIFORM_ROUNDS if case == UNIFORM else 1


def _rep_child(args: argparse.Namespace, seqs: int, rep: int, case: str) -> dict[str, Any]:
    """One repetition of `case`: its sides in lockstep, each in its own process and engine."""
    past_run = Path(args.past)
    if case == TAILED and not (past_run / "summary.json").exists():
        _past_run(args, past_run)
    sides = sides_of(case)
    spec = {"args": vars(args), "seqs": seqs, "case": case}
    figures: dict[str, Any] = {"seqs": seqs, "rep": rep, "method": METHOD, "case": case}
    for result in run_sides(_side, {side: spec for side in sides}).values():
        figures |= result
    policies = {side: figures[side].get("policy") for side in sides}
    expected = {side: POLICIES[side] for side in sides}
    if policies != expected:
        raise RuntimeError(f"admission policies {policies}, expected {expected}")
    return figures


def _side(name: str, spec: dict[str, Any], turns: Turns) -> dict[str, Any]:
    """Side `name` of a repetition, in a process of its own (bench/lockstep.py): its own engine,
    its steps taking turns with the other sides'; every time it reports is its own."""
    from vllm import SamplingParams

    from evalpipe.estimate.lengths import PastLengths, load_lengths
    from evalpipe.run import stream as loop

    args, seqs = argparse.Namespace(**spec["args"]), int(spec["seqs"])
    tasks, lengths = workload(args.prompts, args.max_tokens)
    preset, engine = _open(args.preset, seqs)
    llm = engine._llm
    preemptions = _preemption_counter(engine)
    prompts = [p for t in tasks for p in t.prompts]  # the given order: task by task
    clock = turns.clock()
    # The streaming loop's step times (generation phase, occupancy) count this side's own time.
    loop.time = clock

    def raw(prompts: list[str], forced: dict[str, int]) -> float:
        params = [SamplingParams(max_tokens=forced[p], ignore_eos=True, temperature=0.0)
                  for p in prompts]  # fmt: skip
        t0 = clock.perf_counter()
        llm.chat([[{"role": "user", "content": p}] for p in prompts], params, use_tqdm=False)
        return clock.perf_counter() - t0

    raw(prompts[:8], {p: 8 for p in prompts})  # warm-up, before the turns begin: few tokens
    turns.attach(llm.llm_engine)
    turns.take()  # from here on this side runs only in its turns
    oracle = PastLengths(
        run="oracle",
        preset=preset.name,
        backend="vllm",
        tasks={t.name: {s.id: lengths[s.prompt] for s in t.samples()} for t in tasks},
    )
    short, flat, equal = uniform_work(args.uniform, preset.name)

    def uniform_given() -> dict[str, Any]:
        return _evalpipe(engine, preset, short, flat, admission="given")

    sides = {
        "raw": lambda: {"generate_s": raw(prompts, lengths)},
        "predicted": lambda: _evalpipe(
            engine, preset, tasks, lengths, past=load_lengths([Path(args.past)])
        ),
        "oracle": lambda: _evalpipe(engine, preset, tasks, lengths, past=[oracle]),
        "none": lambda: _evalpipe(engine, preset, tasks, lengths),
        "uniform_raw": lambda: {"generate_s": raw([p for t in short for p in t.prompts], flat)},
        "uniform_given": uniform_given,
        "uniform_again": uniform_given,
        "uniform_longest": lambda: _evalpipe(
            engine, preset, short, flat, admission="longest-first", past=[equal]
        ),
    }
    before = preemptions()
    runs = [sides[name]() for _ in range(rounds(spec["case"]))]
    total = sum(run["generate_s"] for run in runs)
    figures: dict[str, Any] = {"rounds": len(runs), name: runs[-1] | {"generate_s": total}}
    figures[name]["preemptions"] = preemptions() - before
    if name == "raw":
        # Seconds per decode step at a few batch sizes, for the simulator's CPU step model
        # (bench/admission_sim.py): two forced lengths, so the prefill cancels out.
        figures["step_s"] = {}
        probe = min(PROBE_TOKENS, 2 * args.max_tokens)  # the quick mode's few tokens
        for batch in sorted({1, 16, seqs}):
            few = {p: probe for p in prompts[:batch]}
            long = raw(prompts[:batch], few)
            short_s = raw(prompts[:batch], {p: probe // 4 for p in few})
            figures["step_s"][str(batch)] = (long - short_s) / (probe - probe // 4)
    return figures


def _child(argv: list[str], kv_gib: int) -> subprocess.CompletedProcess:
    env = child_env(**(VLLM_ENV | {"VLLM_CPU_KVCACHE_SPACE": str(kv_gib)}))
    done = subprocess.run([sys.executable, __file__, *argv], env=env, cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return done


def kv_gib(row: dict[str, Any]) -> int:
    """The KV cache a repetition ran with (rows from before the option: the default)."""
    return int(row.get("kv_gib", DEFAULT_KV_GIB))


def _per_rep(rows: list[dict[str, Any]], side: str, base: str = "raw") -> list[float]:
    return [r[side]["generate_s"] / r[base]["generate_s"] for r in rows]


def _ratio(rows: list[dict[str, Any]], side: str, base: str = "raw") -> float:
    return median(_per_rep(rows, side, base))


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> int:
    tasks, lengths = workload(args.prompts, args.max_tokens)
    counts = list(lengths.values())
    print(f"# {args.prompts} prompts in {len(tasks)} tasks, {sum(counts)} tokens forced "
          f"(median {median(counts):.0f}, max {max(counts)})")  # fmt: skip
    failed = False
    for seqs in sorted({r["seqs"] for r in rows}):
        mine = [r for r in rows if r["seqs"] == seqs and case_of(r) == TAILED]
        print(f"\n## max_num_seqs {seqs}: {len(mine)} repetitions\n")
        print(
            "| side | median s | per-rep s | / raw (median of per-rep) | tail share | "
            "preemptions per rep |"
        )
        print("|---|---|---|---|---|---|")
        for side in SIDES:
            values = [r[side]["generate_s"] for r in mine]
            tails = [r[side].get("tail_share") for r in mine]
            tail = f"{median(tails):.2f}" if None not in tails and tails else "-"
            counted = [r[side].get("preemptions", "?") for r in mine]  # older rows: not counted
            print(f"| {side} | {median(values):.1f} | {[round(v, 1) for v in values]} | "
                  f"{_ratio(mine, side):.3f} | {tail} | {counted} |")  # fmt: skip
        target = TARGETS.get(seqs)
        if target is not None:
            ratio = _ratio(mine, "predicted")
            print(f"\nevalpipe predicted / raw at {seqs}: {ratio:.3f}× "
                  f"({verdict(ratio, target)} ≤ {target})")  # fmt: skip
            failed |= ratio > target and len(mine) >= 3
        uniform = [r for r in rows if r["seqs"] == seqs and case_of(r) == UNIFORM]
        if uniform:
            _uniform_report(args, uniform)
    return 1 if failed and not args.quick else 0


def _uniform_report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Longest first / given on uniform work, beside the given order run twice: the spread two
    identical sides show in the same repetitions is the noise it is judged against."""
    longest = _ratio(rows, "uniform_longest", "uniform_given")
    again = _per_rep(rows, "uniform_again", "uniform_given")
    noise = max(UNIFORM_NOISE, *(abs(a - 1) for a in again))
    longest_each = [round(x, 3) for x in _per_rep(rows, "uniform_longest", "uniform_given")]
    print(f"uniform ({args.uniform} prompts × {UNIFORM_TOKENS} tokens, {UNIFORM_ROUNDS} runs a "
          f"side, {len(rows)} repetitions): given / raw "
          f"{_ratio(rows, 'uniform_given', 'uniform_raw'):.3f}×; longest first / given "
          f"{longest:.3f}× {longest_each}; given again / given {median(again):.3f}× "
          f"{[round(a, 3) for a in again]}: longest first "
          f"{'within' if abs(longest - 1) <= noise else 'OUTSIDE'} the noise (±{noise:.1%}: "
          f"the wider of ±{UNIFORM_NOISE:.0%} and given again's spread)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_rep":
        args = argparse.Namespace(**json.loads(argv[1]))
        print(json.dumps(_rep_child(args, int(argv[2]), int(argv[3]), argv[4])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2_135m")
    parser.add_argument(
        "--past-preset", default="tiny_random", help="the past run's preset (name or YAML file)"
    )
    parser.add_argument("--prompts", type=int, default=1024)
    parser.add_argument("--max-tokens", type=int, default=512, help="longest answer")
    parser.add_argument("--seqs", default="64,256", help="max_num_seqs values, comma list")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--uniform", type=int, default=200, help="short uniform prompts")
    parser.add_argument(
        "--uniform-reps", type=int, default=None, help="repetitions of the uniform case (--reps)"
    )
    parser.add_argument("--work", default=None, help="past run and results (default .cache/)")
    parser.add_argument(
        "--kv-gib",
        type=int,
        default=DEFAULT_KV_GIB,
        help="the CPU engine's KV cache, GiB (VLLM_CPU_KVCACHE_SPACE)",
    )
    args = parse_args(parser, QUICK, argv)
    args.uniform_reps = args.reps if args.uniform_reps is None else args.uniform_reps
    work = Path(
        args.work or (tempfile.mkdtemp() if args.quick else REPO / ".cache" / "bench-admission")
    )
    args.work = str(work)
    from evalpipe.catalog import weights

    for name in {args.preset, args.past_preset}:
        weights.prepare(name)
    # The first repetition makes it, once per workload.
    past_name = Path(args.past_preset).stem  # a registry name, or a preset file's stem
    args.past = str(work / "past" / f"{past_name}-{args.prompts}-{args.max_tokens}")
    results = work / "results.jsonl"
    rows = (
        [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    )
    rows = [r for r in rows if r.get("prompts") == args.prompts and kv_gib(r) == args.kv_gib
            and r.get("method") == METHOD and r.get("rounds", 1) == rounds(case_of(r))
            and all(side in r for side in sides_of(case_of(r)))]  # fmt: skip
    print(f"# {machine()}\n# start: {load_average()}", flush=True)
    seqs = [int(s) for s in args.seqs.split(",")]
    for n in seqs:
        cases = ([UNIFORM] if n == max(seqs) and args.uniform else []) + [TAILED]  # short first
        for case in cases:
            done_reps = sum(r["seqs"] == n and case_of(r) == case for r in rows)
            for rep in range(done_reps, args.reps if case == TAILED else args.uniform_reps):
                done = _child(["_rep", json.dumps(vars(args)), str(n), str(rep), case], args.kv_gib)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                row |= {"prompts": args.prompts, "kv_gib": args.kv_gib}
                row["load_average"] = load_average()
                took = ", ".join(f"{k} {row[k]['generate_s']:.1f} s"
                                 for k in sides_of(case))  # fmt: skip
                print(f"  max_num_seqs {n} {case} rep {rep + 1}: {took}", file=sys.stderr,
                      flush=True)  # fmt: skip
                with results.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                rows.append(row)
    status = report(args, [r for r in rows if r["seqs"] in seqs])
    print(f"# end: {load_average()}")
    return status


if __name__ == "__main__":
    sys.exit(main())
