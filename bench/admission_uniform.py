"""Uniform short work alone: evalpipe's runner in the given order against longest first, in one
loaded engine, alternating, more repetitions than bench/admission.py can afford at its scale.

    python bench/admission_uniform.py [--reps 5] [--seqs 256] [--kv-gib 4] [--preset smollm2_135m]
    python bench/admission_uniform.py --quick

The work is bench/admission.py's uniform case: 200 short prompts in 4 tasks, every answer forced
to 32 tokens, every prediction the same 32 tokens (so longest first orders by prompt length). The
engine is built once (after a warm-up run); each repetition runs both sides, the first of them
alternating. Issue 28 asks for no loss here: longest first / given within noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from admission import UNIFORM_NOISE, UNIFORM_TOKENS, _evalpipe, _open, uniform_work
from benchlib import QUICK_PRESET, VLLM_ENV, load_average, machine, parse_args

PROMPTS = 200


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2_135m")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seqs", type=int, default=256, help="max_num_seqs")
    parser.add_argument("--prompts", type=int, default=PROMPTS)
    parser.add_argument("--kv-gib", type=int, default=4, help="VLLM_CPU_KVCACHE_SPACE, GiB")
    args = parse_args(
        parser, {"preset": QUICK_PRESET, "reps": 2, "seqs": 4, "prompts": 8, "kv_gib": 1}, argv
    )
    os.environ.update(VLLM_ENV | {"VLLM_CPU_KVCACHE_SPACE": str(args.kv_gib)})
    from evalpipe.catalog import weights

    weights.prepare(args.preset)
    print(f"# {machine()}\n# start: {load_average()}", flush=True)
    preset, engine = _open(args.preset, args.seqs)
    tasks, forced, equal = uniform_work(args.prompts, preset.name)
    sides = {
        "given": lambda: _evalpipe(engine, preset, tasks, forced, admission="given"),
        "longest": lambda: _evalpipe(
            engine, preset, tasks, forced, admission="longest-first", past=[equal]
        ),
    }
    sides["given"]()  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for rep in range(args.reps):
        for name in list(sides)[rep % 2 :] + list(sides)[: rep % 2]:
            seconds[name].append(sides[name]()["generate_s"])
        print(f"  rep {rep + 1}: given {seconds['given'][-1]:.2f} s, longest first "
              f"{seconds['longest'][-1]:.2f} s", file=sys.stderr, flush=True)  # fmt: skip
    engine.close()
    ratios = [a / b for a, b in zip(seconds["longest"], seconds["given"], strict=True)]
    ratio = statistics.median(ratios)
    print(f"{args.prompts} prompts × {UNIFORM_TOKENS} tokens, max_num_seqs {args.seqs}, "
          f"KV cache {args.kv_gib} GiB, preset {args.preset}, {args.reps} repetitions")  # fmt: skip
    for name, values in seconds.items():
        print(f"{name}: median {statistics.median(values):.2f} s, per repetition "
              f"{', '.join(f'{v:.2f}' for v in values)}")  # fmt: skip
    print(
        f"longest first / given: {ratio:.3f}× (median of per-repetition ratios "
        f"{', '.join(f'{r:.3f}' for r in ratios)}; "
        f"{'within' if abs(ratio - 1) <= UNIFORM_NOISE else 'OUTSIDE'} ±{UNIFORM_NOISE:.0%})"
    )
    print(f"# end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
