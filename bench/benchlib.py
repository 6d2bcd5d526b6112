"""Shared by the bench/ scripts: interleaved repetitions, medians, child processes, the machine.

Ratios are only meaningful when both sides ran under the same conditions, so every script
alternates its cases within one run (A B, B A, A B, ...) and reports medians, never absolute
times from separate runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parent.parent
# The scripts measure this checkout's evalpipe, in their own process too, whatever is installed.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# The tests' builders the benches share: lm-eval task files (lmeval_support), the near-tie rule
# for comparing model text (neartie).
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))
if TYPE_CHECKING:
    from evalpipe.rundir.summary import Summary


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a child Python: this checkout first on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@dataclass(frozen=True, kw_only=True)
class Timing:
    """One child process: wall seconds, and CPU seconds (user + system, its children included),
    which other load on a shared machine disturbs less than wall time."""

    wall_s: float
    cpu_s: float


def _run(argv: Sequence[str], env: Mapping[str, str] | None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        list(argv), env=dict(env or child_env()), cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited {done.returncode}:\n"
            f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    return done


def children_cpu() -> float:
    """User + system CPU seconds of this process's reaped children (less noisy than wall
    time on a busy machine)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> Timing:
    """Time one child process; a failing child is a RuntimeError showing its output's tail."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    _run(argv, env)
    return Timing(wall_s=time.perf_counter() - t0, cpu_s=children_cpu() - cpu0)


def json_child(argv: Sequence[str], *, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run a child that prints one JSON object as its last stdout line; return that object."""
    return json.loads(_run(argv, env).stdout.strip().splitlines()[-1])


def interleave(cases: Mapping[str, Callable[[], Any]], reps: int) -> dict[str, list[Any]]:
    """Call every case `reps` times, rotating the order each round so none always goes first."""
    names = list(cases)
    results: dict[str, list[Any]] = {name: [] for name in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            results[name].append(cases[name]())
            print(f"  rep {rep + 1}/{reps} {name} done", file=sys.stderr, flush=True)
    return results


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> str:
    """'median (min–max, n=K)' for a table cell."""
    return f"{median(values):.3f} ({min(values):.3f}–{max(values):.3f}, n={len(values)})"


def machine() -> str:
    """One line naming the machine the figures were taken on."""
    from evalpipe.core.provenance import cpu_model

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = cpu_model()
    avx512 = "AVX-512" if " avx512f" in cpuinfo else "no AVX-512"
    mem_kib = 0
    if Path("/proc/meminfo").exists():
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_kib = int(first.split()[1])
    return (
        f"{os.cpu_count()} cores {platform.machine()} {avx512} ({model}), "
        f"{mem_kib / 2**20:.0f} GiB, Python {platform.python_version()}, {platform.platform()}"
    )


def load_average() -> str:
    """The machine's load now: figures taken beside other work are slower and noisier."""
    one, five, fifteen = os.getloadavg()
    return (
        f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min, "
        f"{os.cpu_count()} cores)"
    )


# Quick mode: every script's own code path at tiny sizes, in seconds (tests/test_bench_quick.py
# runs each one, so a rename in evalpipe breaks a test instead of `make bench`).
QUICK_PRESET = "tiny_random"  # loads in a second; its answers are noise, its timings are not


def parse_args(
    parser: argparse.ArgumentParser, quick: dict[str, Any], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """The script's arguments, with `--quick` added: it makes `quick` the defaults (options given
    on the command line still win). Quick figures are too small to judge a target by, so a
    script prints its verdicts but exits 0 on them (its correctness checks still count)."""
    sizes = " ".join(f"--{name.replace('_', '-')} {value}" for name, value in quick.items())
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"tiny sizes, in seconds, to check that the script works ({sizes})",
    )
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**quick)
        print(f"quick mode ({sizes}): figures too small to judge; targets not enforced", flush=True)
    return parser.parse_args(argv)


def print_checks(checks: Mapping[str, tuple[int, Sequence[str]]]) -> int:
    """Print each agreement check as `name: equal/checked` with the cases that differ; the exit
    status (1 when any differs)."""
    for name, (checked, wrong) in checks.items():
        print(f"{name}: {checked - len(wrong)}/{checked}")
        for line in wrong:
            print(f"  DIFFERS {line}")
    return 1 if any(wrong for _, wrong in checks.values()) else 0


def verdict(value: float, target: float) -> str:
    """'meets' or 'MISSES' a ≤ target."""
    return "meets" if value <= target else "MISSES"


# lm-eval, installed apart by `make bench` (bench/lm_eval_requirements.txt says why).
LM_EVAL_DIR = REPO / ".cache" / "bench-lm-eval"
LM_EVAL_MISSING = (
    f"lm-eval is not installed in {LM_EVAL_DIR}: run `make bench`, or\n  "
    f"{sys.executable} -m pip install --no-deps --target {LM_EVAL_DIR} "
    "-r bench/lm_eval_requirements.txt"
)


def lm_eval_model_args(engine_kwargs: Mapping[str, Any]) -> str:
    """lm-eval's --model_args for its vLLM backend: every LLM() argument evalpipe's engine was
    built with (a run manifest's engine_kwargs, the CPU defaults such as whole prefills
    included), so both sides run the same engine."""
    rest = [f"{k}={v}" for k, v in engine_kwargs.items() if k != "model" and v is not None]
    return ",".join([f"pretrained={engine_kwargs['model']}", *rest])


# The same vLLM environment for every side of a comparison: the CPU KV cache fixed at 1 GiB,
# the engine core in the calling process, no hub.
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@dataclass(frozen=True, kw_only=True)
class EvalpipeRun:
    """One `evalpipe run` process and what its run directory says about it."""

    timing: Timing
    timings: dict[str, float]  # the manifest's phases: load, generate:<cat>, score:<cat>
    samples: list[dict[str, Any]]  # samples.jsonl, in file order
    summary: Summary
    engine: dict[str, Any]  # the manifest's engine description (effective LLM() kwargs)

    def phase(self, prefix: str) -> float:
        return sum(v for k, v in self.timings.items() if k == prefix or k.startswith(prefix + ":"))

    @property
    def generated_tokens(self) -> int:
        return sum(sum(s["completion_tokens"]) for s in self.samples)


def _summary(out: Path) -> Summary:
    from evalpipe.rundir.layout import RunDir
    from evalpipe.rundir.summary import read_summary

    summary = read_summary(RunDir(out))
    if summary is None:
        raise SystemExit(f"{out}: the run wrote no summary.json")
    return summary


def evalpipe_run(
    preset: str, task: str, limit: int | None, out: Path, env: Mapping[str, str], *extra: str
) -> EvalpipeRun:
    """`python -m evalpipe run` on `task` (a --tasks value) into a new run directory `out`,
    with the options `extra`, defaults otherwise (chunked, checkpointed, scored, monitored)."""
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", preset, "--tasks", task, *extra]
    if limit is not None:
        argv += ["--limit", str(limit)]
    timing = timed_run([*argv, "--out", str(out)], env=env)
    manifest = json.loads((out / "manifest.json").read_text())
    lines = (out / "samples.jsonl").read_text().splitlines()
    return EvalpipeRun(
        timing=timing,
        timings=manifest["timings"],
        samples=[json.loads(line) for line in lines if line.strip()],
        summary=_summary(out),
        engine=manifest.get("engine") or {},
    )


def reference_run(
    preset: str, task: str, limit: int | None, out: Path, vllm_env: Mapping[str, str]
) -> Any:
    """evalpipe's run of `task` on vLLM in this process, every token's top-2 log-probabilities
    recorded (neartie.record_run): the reference the near-tie rule reads. `vllm_env`: the
    variables the timed sides ran with, set here too so the engine is built alike. Untimed: a
    script records it after its timed sides, and only where their texts differ."""
    from neartie import record_run, tokenizer_decode

    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.tasks import load_tasks

    os.environ.update(vllm_env)
    decode = tokenizer_decode(weights.model_source(load_preset(preset)))
    return record_run(preset, load_tasks(tasks=(task,)), out, limit=limit, decode=decode)


def near_ties(
    prompts: Mapping[str, Any], sides: Mapping[str, Mapping[str, Sequence[str]]], reference: Any
) -> dict[str, Any]:
    """Each side's completions (by sample id) against the reference run's under the near-tie
    rule: a neartie.Tally per side. `prompts`: each sample's prompt, as samples.jsonl has it."""
    from neartie import prompt_key, tally

    def compared(completions: Mapping[str, Sequence[str]]) -> Iterator[tuple[str, Any, Any]]:
        for sample_id, texts in completions.items():
            yield sample_id, reference.generations[prompt_key(prompts[sample_id])], texts

    return {name: tally(compared(texts), reference.decode) for name, texts in sides.items()}
