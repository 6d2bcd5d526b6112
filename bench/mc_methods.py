"""Multiple choice by log-probabilities against by generation, and evalpipe's one-step letter
scoring against vLLM prompt logprobs: the same questions on the same engine, side by side.

    python bench/mc_methods.py [--limit 40] [--reps 3] [--preset P]
    python bench/mc_methods.py --quick     # 2 questions on tiny_random, once: does it work

Real vLLM on this machine's CPU, preset smollm2_135m, the offline `ordering` set. One process,
one engine with prefix caching off (so no side reuses a prefill another side computed); each
repetition gives every side the same fresh slice of questions, in rotating order:

- generate: the task's own generation (greedy, 16 tokens), as `--mc-method generate` runs it;
- letters: `VllmEngine.loglikelihoods` on " A" … " D", as `--mc-method logprobs` runs it (one
  decoding step per question, vLLM's `logprob_token_ids`);
- prompt_logprobs: the same options scored through vLLM prompt logprobs, one prefill per option
  (what evalpipe does for continuations of several tokens).

Every option's log-probability from `letters` must equal the `prompt_logprobs` one (1e-3).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any

from benchlib import (
    QUICK_PRESET,
    VLLM_ENV,
    interleave,
    load_average,
    machine,
    median,
    parse_args,
    spread,
    verdict,
)

LETTERS_VS_GENERATE_TARGET = 1.0  # ranking four letters costs no more than generating
LETTERS_VS_PROMPT_LOGPROBS_TARGET = 0.5  # the one-step path at least halves the cost


def prompt_logprobs(engine: Any, requests: list[tuple[Any, str]]) -> list[float]:
    """The options scored the long way: every request's whole sequence through prompt logprobs."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    encoded = [engine._encode(prompt, option) for prompt, option in requests]
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids, _ in encoded]
    outputs = engine._llm.generate(prompts, params, use_tqdm=False)
    return [
        sum(out.prompt_logprobs[p][ids[p]].logprob for p in range(start, len(ids)))
        for out, (ids, start) in zip(outputs, encoded, strict=True)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=40, help="questions per side per repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default="smollm2_135m", help="a preset with a recipe")
    args = parse_args(parser, {"limit": 2, "reps": 1, "preset": QUICK_PRESET})
    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)

    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import VllmEngine
    from evalpipe.tasks import load_tasks

    [task] = load_tasks(tasks=["ordering"], mc_method="logprobs")
    samples = task.samples()
    if len(samples) < args.limit * args.reps:
        parser.error(f"--limit × --reps must be at most {len(samples)} (the set's size)")
    weights.prepare(args.preset)
    preset = load_preset(args.preset)
    preset = dataclasses.replace(
        preset, engine_kwargs={**preset.engine_kwargs, "enable_prefix_caching": False}
    )
    engine = VllmEngine.open(preset, EngineSettings())
    sampling = load_tasks(tasks=["ordering"])[0].sampling
    # Warm-up outside the timings: the first calls of each kind compile and allocate.
    warm = [(samples[0].prompt, o.continuation) for o in samples[0].options]
    engine.generate([samples[0].prompt], sampling)
    engine.loglikelihoods(warm)
    prompt_logprobs(engine, warm)

    rounds: dict[str, int] = {"generate": 0, "letters": 0, "prompt_logprobs": 0}
    scored: dict[str, list[list[float]]] = {"letters": [], "prompt_logprobs": []}

    def side(name: str) -> float:
        chunk = samples[rounds[name] * args.limit : (rounds[name] + 1) * args.limit]
        rounds[name] += 1
        requests = [(s.prompt, o.continuation) for s in chunk for o in s.options]
        start = time.perf_counter()
        if name == "generate":
            engine.generate([s.prompt for s in chunk], sampling)
        elif name == "letters":
            scored[name].append([x.logprob for x in engine.loglikelihoods(requests)])
        else:
            scored[name].append(prompt_logprobs(engine, requests))
        return (time.perf_counter() - start) / len(chunk)

    times = interleave({name: lambda name=name: side(name) for name in rounds}, args.reps)
    engine.close()

    fast = [x for rep in scored["letters"] for x in rep]
    slow = [x for rep in scored["prompt_logprobs"] for x in rep]
    worst = max(abs(a - b) for a, b in zip(fast, slow, strict=True))
    vs_generate = median([a / b for a, b in zip(times["letters"], times["generate"], strict=True)])
    vs_prompt = median(
        [a / b for a, b in zip(times["letters"], times["prompt_logprobs"], strict=True)]
    )
    print(f"machine: {machine()}")
    print(f"{load_average()}")
    print(f"preset {args.preset}, task ordering, {args.limit} questions × 4 options a side a rep")
    print()
    print("| side | seconds per question, median (min–max) |")
    print("|---|---|")
    for name, values in times.items():
        print(f"| {name} | {spread(values)} |")
    print()
    for label, value, target in (
        ("letters / generate", vs_generate, LETTERS_VS_GENERATE_TARGET),
        ("letters / prompt_logprobs", vs_prompt, LETTERS_VS_PROMPT_LOGPROBS_TARGET),
    ):
        print(f"{label}: {value:.2f}× (target ≤ {target}, {verdict(value, target)})")
    agree = worst <= 1e-3
    print(
        f"option log-probabilities, letters vs prompt_logprobs: {len(fast)} compared, "
        f"largest difference {worst:.2e} ({'agree' if agree else 'DISAGREE'})"
    )
    met = (
        vs_generate <= LETTERS_VS_GENERATE_TARGET and vs_prompt <= LETTERS_VS_PROMPT_LOGPROBS_TARGET
    )
    return 0 if agree and (met or args.quick) else 1


if __name__ == "__main__":
    sys.exit(main())
