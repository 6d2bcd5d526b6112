"""τ²-bench: `evalpipe run --tasks tau2:mock …` against τ²'s own runner (`tau2 run` over `vllm
serve`), whole processes, interleaved, medians. Target: evalpipe ≤ 0.6× τ²'s best wall.

    python bench/tau2_speed.py [--preset smollm2_135m] [--domain mock] [--limit N]
                               [--max-steps 8] [--max-tokens 48] [--concurrency 3,8] [--reps 3]
    python bench/tau2_speed.py --engine-core process   # evalpipe's vLLM engine core apart
    python bench/tau2_speed.py --quick   # tiny_random, 2 tasks, 2 steps, 4 tokens, once

The same model as agent and user simulator on both sides, the same τ² tasks (the ones
evalpipe's run holds: mock's, less the two τ² starts from a recorded conversation), one trial
seeded from τ²'s seed 300, temperature 0, the same step limit, the same new-token budget per
step, the same engine:
- `evalpipe run --tasks tau2:DOMAIN --user-sim PRESET --tau2-max-steps S --max-tokens T`: one
  process, the model loaded in it, every episode's steps in its streaming loop, each episode
  scored by τ²'s evaluators (tau2_smollm2.py's copy of the preset, tool calls read with the
  `pythonic` parser).
- `tau2 run` (whole), at τ²'s default concurrency (3, `--max-concurrency`) and at 8, every
  episode at once (its best here; no higher one differs with 7 episodes): the bench starts
  `vllm serve` with the LLM() arguments evalpipe's engine recorded in its manifest, the same
  tool parser (`--enable-auto-tool-choice --tool-call-parser`) and the budget as the server's
  cap (`--override-generation-config '{"max_new_tokens": T}'`: τ² sends no max_tokens), waits
  for it, runs τ²'s CLI (agent and user `hosted_vllm/…` through LiteLLM with `api_base`: how
  LiteLLM names a vLLM server), stops the server. τ²'s evaluator scores each episode too.
- `tau2 run` (generation alone): the same against a server already up (untimed, stopped after
  both concurrencies ran on it).

τ²'s package comes from its own folder (scripts/tau2.sh), last on the path of its process, with
the quiet import variables evalpipe sets (evalpipe/tasks/tau2/install.py). The model's text
may differ between the sides (batches differ, and so float sums), so episodes may take other
turns; each side's ends and rewards are printed beside the walls.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchlib import (
    QUICK_PRESET,
    VLLM_ENV,
    EvalpipeRun,
    Timing,
    child_env,
    children_cpu,
    evalpipe_run,
    interleave,
    load_average,
    machine,
    median,
    parse_args,
    timed_run,
    verdict,
)
from bfcl_speed import engine_options, shared_server
from tau2_smollm2 import parsed_preset, report, rescored

from evalpipe.catalog.preset import load_preset
from evalpipe.run.vllmserver import free_port
from evalpipe.tasks.tau2.install import QUIET, tau2_dir

TARGET = 0.6
DEFAULT_CONCURRENCY = 3  # τ²'s --max-concurrency (tau2/config.py DEFAULT_MAX_CONCURRENCY)
OURS = "evalpipe run"
# τ²'s default, and every episode at once (mock runs 7 tasks: a higher concurrency leaves τ²'s
# thread pool nothing more to start), the fastest here of those tried (BENCHMARKS.md §28).
CONCURRENCY = f"{DEFAULT_CONCURRENCY},8"
# τ²'s CLI from its folder, last on the path. argv: the folder, then `tau2`'s own arguments.
LAUNCH = r"""
import sys
sys.path.append(sys.argv[1])
sys.argv = ["tau2", *sys.argv[2:]]
from tau2.cli import main
main()
"""


def whole(c: int) -> str:
    return f"tau2 run --max-concurrency {c}"


def alone(c: int) -> str:
    return f"{whole(c)} (server up)"


def server_options(run: EvalpipeRun, max_tokens: int, parser: str) -> list[str]:
    """The server for evalpipe's engine (bfcl_speed's), with the preset's tool parser."""
    options = engine_options(run, max_tokens, free_port())
    return [*options, "--enable-auto-tool-choice", "--tool-call-parser", parser]


def tau2_argv(model: str, url: str, domain: str, task_ids: Sequence[str], *, steps: int,
              concurrency: int, out: Path) -> list[str]:  # fmt: skip
    """τ²'s `tau2 run` with the model as agent and user, against the server at `url`."""
    llm = f"hosted_vllm/{model}"
    llm_args = json.dumps({"temperature": 0.0, "api_base": url})
    return [sys.executable, "-c", LAUNCH, str(tau2_dir()), "run", "--domain", domain,
            "--task-ids", *task_ids, "--num-trials", "1", "--max-steps", str(steps),
            "--agent-llm", llm, "--agent-llm-args", llm_args, "--user-llm", llm,
            "--user-llm-args", llm_args, "--max-concurrency", str(concurrency),
            "--results-dir", str(out.parent), "--save-to", out.stem]  # fmt: skip


def simulations(out: Path) -> list[dict[str, Any]]:
    """τ²'s saved simulations: each one's task, end and reward."""
    data = json.loads(out.with_suffix(".json").read_text())
    return [{"task_id": s["task_id"], "end": s["termination_reason"],
             "reward": (s.get("reward_info") or {}).get("reward"),
             "steps": len(s.get("messages") or ())} for s in data["simulations"]]  # fmt: skip


def served(options: Sequence[str], model: str, env: Mapping[str, str], log: Path,
           run: Callable[[str], None]) -> Timing:  # fmt: skip
    """Start the server, call `run` with its URL, stop it: the whole as one timing."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    server = shared_server(options, model, env, log)
    try:
        run(f"http://127.0.0.1:{options[options.index('--port') + 1]}/v1")
    finally:
        server.terminate()
        server.wait(timeout=60)
    return Timing(wall_s=time.perf_counter() - t0, cpu_s=children_cpu() - cpu0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared preset")
    parser.add_argument("--domain", default="mock")
    parser.add_argument("--limit", type=int, default=None, help="τ² tasks (default: all)")
    parser.add_argument("--max-steps", type=int, default=8, help="τ²'s max steps, both sides")
    parser.add_argument("--max-tokens", type=int, default=48, help="new tokens a step, both")
    parser.add_argument(
        "--concurrency",
        type=lambda t: [int(c) for c in t.split(",")],
        default=CONCURRENCY,
        help="τ²'s --max-concurrency values to run",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--engine-core",
        choices=("in-process", "process"),
        default="in-process",
        help="where evalpipe's run keeps vLLM's engine core: in its own process "
        "(evalpipe's default on the CPU) or in one of its own, as the server "
        "does (VLLM_ENABLE_V1_MULTIPROCESSING=1, which evalpipe honours)",
    )
    quick = {
        "preset": QUICK_PRESET,
        "limit": 2,
        "max_steps": 2,
        "max_tokens": 4,
        "reps": 1,
        "concurrency": "3",
    }
    args = parse_args(parser, quick)
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    print(f"preset {args.preset} as agent and user, tau2:{args.domain}, "
          f"{args.limit or 'all'} tasks, 1 trial, max steps {args.max_steps}, max_tokens "
          f"{args.max_tokens}, temperature 0, seed 300; evalpipe's engine core "
          f"{args.engine_core}")  # fmt: skip
    env = child_env(**VLLM_ENV, **QUIET)
    # A server keeps vLLM's own engine-core process (evalpipe's engine sets this one itself).
    server_env = {k: v for k, v in env.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    separate = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # set: evalpipe keeps the user's value
    ours_env = env if args.engine_core == "in-process" else dict(env, **separate)
    ours: list[EvalpipeRun] = []
    theirs: dict[str, list[Timing]] = {}
    ends: dict[str, list[dict[str, Any]]] = {}
    differ: list[int] = []  # evalpipe's episodes unscored or scored unlike τ²
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-tau2-") as tmp:
        folder = Path(tmp)
        preset_path = parsed_preset(args.preset, folder)
        tool_parser = load_preset(str(preset_path)).tool_parser or ""

        def run_ours() -> None:
            out = folder / f"run-{len(ours)}"
            ours.append(evalpipe_run(str(preset_path), f"tau2:{args.domain}", args.limit, out,
                                     ours_env, "--user-sim", args.preset,
                                     "--tau2-max-steps", str(args.max_steps),
                                     "--max-tokens", str(args.max_tokens)))  # fmt: skip
            print(f"  {OURS}: wall {ours[-1].timing.wall_s:.2f} s", flush=True)
            if len(ours) == 1:  # its episodes re-scored while the others run
                print("  evalpipe's episodes, re-scored by τ²'s evaluate_simulation:")
                differ.append(report(rescored(out, args.domain, args.max_steps, args.limit)))

        def task_ids() -> list[str]:
            return list(dict.fromkeys(s["sample_id"].split("#")[0] for s in ours[0].samples))

        def cli(c: int, url: str, name: str, n: int) -> Timing:
            """τ²'s CLI at concurrency `c` against `url`; its episodes kept from its first run."""
            out = folder / f"tau2-{c}-{'alone' if name == alone(c) else 'whole'}-{n}"
            model = ours[0].engine["engine_kwargs"]["model"]
            timing = timed_run(tau2_argv(model, url, args.domain, task_ids(),
                                         steps=args.max_steps, concurrency=c, out=out),
                               env=server_env)  # fmt: skip
            ends.setdefault(name, simulations(out))
            return timing

        def run_whole(c: int) -> Callable[[], None]:
            def side() -> None:
                options = server_options(ours[0], args.max_tokens, tool_parser)
                model = ours[0].engine["engine_kwargs"]["model"]
                n = len(theirs.setdefault(whole(c), []))
                timing = served(options, model, server_env, folder / f"server-{c}-{n}.log",
                                lambda url: cli(c, url, whole(c), n) and None)  # fmt: skip
                theirs[whole(c)].append(timing)
                print(f"  {whole(c)}: wall {timing.wall_s:.2f} s", flush=True)

            return side

        def run_alone() -> None:
            options = server_options(ours[0], args.max_tokens, tool_parser)
            model = ours[0].engine["engine_kwargs"]["model"]

            def each(url: str) -> None:
                for c in args.concurrency:
                    n = len(theirs.setdefault(alone(c), []))
                    theirs[alone(c)].append(cli(c, url, alone(c), n))
                    print(f"  {alone(c)}: wall {theirs[alone(c)][-1].wall_s:.2f} s", flush=True)

            served(options, model, server_env, folder / "server-alone.log", each)

        # evalpipe first in the first round: τ²'s sides take its engine arguments and tasks.
        sides: dict[str, Callable[[], None]] = {OURS: run_ours}
        sides.update({whole(c): run_whole(c) for c in args.concurrency})
        sides["tau2 run (server up)"] = run_alone
        interleave(sides, args.reps)
    summary(ours, theirs, ends, args.reps)
    return 1 if any(differ) else 0


def summary(ours: list[EvalpipeRun], theirs: Mapping[str, list[Timing]],
            ends: Mapping[str, list[dict[str, Any]]], reps: int) -> None:  # fmt: skip
    """Print each side's walls, the ratios, each side's ends and rewards."""

    def cell(timings: Sequence[Timing]) -> str:
        walls = [t.wall_s for t in timings]
        return (f"wall {median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f}), "
                f"CPU {median([t.cpu_s for t in timings]):.2f} s")  # fmt: skip

    print(
        f"\n(medians of {reps}, each a whole process: evalpipe's includes its model load and "
        "τ²'s evaluator on every episode; τ²'s whole includes the server's start and stop)"
    )
    print(f"{OURS}: {cell([o.timing for o in ours])}; load "
          f"{median([o.phase('load') for o in ours]):.2f} s, generate "
          f"{median([o.phase('generate') for o in ours]):.2f} s; "
          f"{len(ours[0].samples)} episodes")  # fmt: skip
    mine = median([o.timing.wall_s for o in ours])
    best = min((median([t.wall_s for t in v]), k) for k, v in theirs.items() if "(" not in k)
    for side, timings in theirs.items():
        print(f"{side}: {cell(timings)}; ratio evalpipe / it "
              f"{mine / median([t.wall_s for t in timings]):.3f}")  # fmt: skip
    print(f"τ²'s best whole: {best[1]}; evalpipe / it {mine / best[0]:.3f}, target ≤ {TARGET}: "
          f"{verdict(mine / best[0], TARGET)}")  # fmt: skip
    for side, sims in ends.items():
        counted = Counter(s["end"] for s in sims)
        print(f"{side}'s episodes: {', '.join(f'{k} {v}' for k, v in sorted(counted.items()))}; "
              f"rewards {[s['reward'] for s in sims]}")  # fmt: skip
    print(f"at end: {load_average()}")


if __name__ == "__main__":
    raise SystemExit(main())
