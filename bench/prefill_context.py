"""Prefill time against prompt length on the CPU engine, measured beside the estimate's model of
it: the weights' matmuls grow with the length L, attention's share with L² (evalpipe/estimate/
throughput.py, `Attention` and `Rates.prompt_s`).

    python bench/prefill_context.py [--lengths 1024,2048,4096,8128] [--reps 3] [--preset P]
    python bench/prefill_context.py --quick   # tiny_random, 3 short lengths, once: does it work

Real vLLM on this machine's CPU, preset smollm2_135m (8,192 positions), one engine built as
evalpipe builds it, prefix caching off. Each repetition sends one prompt of every length, in
rotating order, as fresh random token ids (nothing cached), and times a 1-token generation: the
prefill, in CPU seconds of this process (the engine runs in it; other load on a shared machine
disturbs them less than wall time, which is printed beside). The model is calibrated as
`evalpipe smoke` calibrates it, on one short prompt (the shortest length): its per-token time
fixes the matmuls' FLOP rate, and attention is taken to run at that rate. Printed per length:
measured (wall and CPU), the model with a fixed cost per call and one rate fitted over every
length (its shape: L plus attention's L² in the architecture's proportion), a line in L fitted
the same way, and the model calibrated on the shortest prompt alone, each with its error; then a
free fit t = c + a·L + b·L², what an attention FLOP costs against a matmul FLOP on this machine,
and the attention share at the longest length, fitted and modelled.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import time

from benchlib import (
    QUICK_PRESET,
    VLLM_ENV,
    interleave,
    load_average,
    machine,
    median,
    parse_args,
    spread,
)


def _lengths(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",")})


def least_squares(columns: list[list[float]], times: list[float]) -> list[float]:
    """Least-squares coefficients of `times` over the given columns of terms."""
    import numpy as np

    terms = np.array(columns, dtype=float).T
    return [float(x) for x in np.linalg.lstsq(terms, np.array(times), rcond=None)[0]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lengths", type=_lengths, default=_lengths("1024,2048,4096,8128"), help="prompt tokens"
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default="smollm2_135m", help="a preset with a recipe")
    args = parse_args(parser, {"lengths": "128,256,512", "reps": 1, "preset": QUICK_PRESET})
    if isinstance(args.lengths, str):  # a --quick default is the flag's text
        args.lengths = _lengths(args.lengths)
    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine
    from evalpipe.estimate.throughput import Attention, attention_flop_s

    start_load = load_average()
    weights.prepare(args.preset)
    preset = load_preset(args.preset)
    longest = max(args.lengths)
    if longest >= preset.architecture.context_ceiling:
        parser.error(
            f"--lengths: {longest} leaves no room for the generated token in {args.preset}'s "
            f"{preset.architecture.context_ceiling} positions"
        )
    preset = dataclasses.replace(
        preset, engine_kwargs={**preset.engine_kwargs, "enable_prefix_caching": False}
    )
    engine = VllmEngine.open(preset, EngineSettings(max_model_len=longest + 1))
    llm = engine._llm
    vocab = preset.architecture.vocab_size
    draw = random.Random(0)
    params = SamplingParams(max_tokens=1, temperature=0.0)

    def prefill(length: int) -> tuple[float, float]:
        """(CPU seconds, wall seconds) of one prefill of `length` fresh tokens (nothing cached).
        The engine runs in this process, so its CPU time is the work, which other load on a
        shared machine disturbs far less than the wall time."""
        ids = [draw.randrange(3, vocab) for _ in range(length)]
        wall, cpu = time.perf_counter(), time.process_time()
        llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
        return time.process_time() - cpu, time.perf_counter() - wall

    for length in args.lengths:  # warm-up: the first call of each shape allocates
        prefill(length)
    runs = interleave({str(n): lambda n=n: prefill(n) for n in args.lengths}, args.reps)
    engine.close()

    times = {n: [cpu for cpu, _ in values] for n, values in runs.items()}
    walls = {n: [wall for _, wall in values] for n, values in runs.items()}
    measured = {n: median(times[str(n)]) for n in args.lengths}
    attention = Attention.of(preset.architecture)
    per_flop = attention_flop_s(preset, 1.0)  # an attention FLOP, in prompt tokens' matmuls

    def shape(n: int) -> float:
        """The model's prefill of n tokens, in units of one token's matmuls."""
        return n + attention.flops(n) * per_flop

    cpu = [measured[n] for n in args.lengths]
    shortest, ones = min(args.lengths), [1.0] * len(cpu)
    # As the smoke probe calibrates it: the shortest prompt alone fixes the rate.
    smoke_s = measured[shortest] / shape(shortest)
    # A fixed cost per call plus one rate, fitted over every length: the model's shape (L and
    # attention's L² in the architecture's proportion) against a line in L.
    model_c, model_s = least_squares([ones, [shape(n) for n in args.lengths]], cpu)
    line_c, line_s = least_squares([ones, [float(n) for n in args.lengths]], cpu)

    print(f"machine: {machine()}")
    print(f"start: {start_load}, end: {load_average()}")
    print(f"preset {args.preset}, {args.reps} repetition(s), one prompt of each length a rep")
    print()
    print(
        "| prompt tokens | wall s, median (min–max) | CPU s, median (min–max) | model fitted: "
        "c + s·(L + attention) | line fitted: c + s·L | model on the shortest alone | "
        "modelled attention share |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in args.lengths:
        cells = [
            model_c + model_s * shape(n),
            line_c + line_s * n,
            smoke_s * shape(n),
        ]
        errors = " | ".join(f"{x:.3f} ({x / measured[n] - 1:+.0%})" for x in cells)
        share = attention.flops(n) * per_flop / shape(n)
        print(
            f"| {n} | {spread(walls[str(n)])} | {spread(times[str(n)])} | {errors} | {share:.0%} |"
        )
    print()
    print(
        f"model fitted: c {model_c:.3f} s, s {model_s:.3e} s/token; line fitted: c {line_c:.3f} "
        f"s, s {line_s:.3e} s/token"
    )
    if len(args.lengths) >= 3:
        c, a, b = least_squares(
            [ones, [float(n) for n in args.lengths], [float(n * n) for n in args.lengths]], cpu
        )
        # The model's b / a is attention's FLOPs per L² in matmul-token units; the fit's over it
        # is what an attention FLOP costs against a matmul FLOP on this machine.
        relative = b / (a * attention.flops(longest) / longest**2 * per_flop)
        fitted_share = b * longest**2 / (a * longest + b * longest**2)
        print(
            f"free fit t = c + a·L + b·L²: c {c:.3f} s, a {a:.3e} s/token, b {b:.3e} s/token²: "
            f"an attention FLOP costs {relative:.2f}× a matmul FLOP; attention share at "
            f"{longest} tokens: fitted {fitted_share:.0%}, modelled "
            f"{attention.flops(longest) * per_flop / shape(longest):.0%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
