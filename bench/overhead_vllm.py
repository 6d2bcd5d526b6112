"""evalpipe's overhead over vLLM called directly: the same prompts, sampling settings and engine
through a minimal `LLM.chat`/`LLM.generate` script (bench/raw_vllm.py) and through
`evalpipe run` (chunking, checkpointing, scoring and the monitor all on, as a user runs it).

    python bench/overhead_vllm.py [--task arithmetic] [--limit 200] [--reps 3] [--preset P]
    python bench/overhead_vllm.py --quick      # 4 short answers on tiny_random, once

Real vLLM on this machine's CPU, preset smollm2_135m (prepare it once with
`evalpipe models prepare smollm2_135m`), greedy decoding with the task's own settings. Each side
runs in its own process; the sides alternate (evalpipe first in odd repetitions, the raw script
first in even ones) and the ratios are medians of the per-repetition ratios. The raw script gets
exactly the LLM() arguments evalpipe's engine builds (checked against the run's manifest), and
the completions of both sides are compared text for text and token count for token count. Where
texts differ, a reference run in this process records evalpipe's top-2 log-probabilities, and
each side's texts must equal the reference's modulo near-ties (tests/neartie.py): another
process batches and sums in another order, and where the model's two likeliest tokens are nearly
tied (`6 * 3` against `6 x 3`) that can pick the other one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchlib import (
    QUICK_PRESET,
    REPO,
    VLLM_ENV,
    EvalpipeRun,
    child_env,
    evalpipe_run,
    interleave,
    load_average,
    machine,
    median,
    near_ties,
    parse_args,
    reference_run,
    timed_run,
    verdict,
)

GENERATE_TARGET = 1.05
E2E_TARGET = 1.10


def reference_spec(preset_name: str, task_name: str, limit: int) -> dict[str, Any]:
    """The raw script's input: evalpipe's prompts for the task, its LLM() arguments and the
    SamplingParams its engine builds from the task's settings."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.protocol import EngineSettings
    from evalpipe.engine.vllm import engine_kwargs
    from evalpipe.tasks import load_tasks

    preset = load_preset(preset_name)
    (task,) = load_tasks(tasks=(task_name,))
    s = task.sampling
    samples = task.samples(limit)
    return {
        # What evalpipe's engine passes, its CPU defaults included (imports vLLM, untimed).
        "llm": json.loads(json.dumps(engine_kwargs(preset, EngineSettings())[1])),
        "sampling": {
            "n": s.n,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
            "stop": list(s.stop) or None,
            "seed": s.seed if s.temperature > 0 else None,
        },
        "chat": preset.chat,
        "prompts": [sample.prompt for sample in samples],
        "sample_ids": [sample.id for sample in samples],
    }


def raw_run(spec_path: Path, out: Path, env: dict[str, str]) -> dict[str, Any]:
    timing = timed_run(
        [sys.executable, str(REPO / "bench" / "raw_vllm.py"), str(spec_path), str(out)], env=env
    )
    result = json.loads(out.read_text())
    result["timing"] = timing
    return result


def compare(
    spec: dict[str, Any], raw: dict[str, Any], ours: EvalpipeRun
) -> tuple[int, int, list[str]]:
    """(identical texts, identical token counts, first differences) over the samples."""
    by_id = {s["sample_id"]: s for s in ours.samples}
    same_text = same_tokens = 0
    diffs = []
    for i, sample_id in enumerate(spec["sample_ids"]):
        mine = by_id[sample_id]
        if mine["completions"] == raw["texts"][i]:
            same_text += 1
        elif len(diffs) < 3:
            diffs.append(
                f"{sample_id}: raw {raw['texts'][i]!r} vs evalpipe {mine['completions']!r}"
            )
        same_tokens += mine["completion_tokens"] == raw["completion_tokens"][i]
    return same_text, same_tokens, diffs


def paired_ratio(pairs: list[tuple[float, float]]) -> float:
    """Median over repetitions of evalpipe / raw, each pair measured back to back."""
    return statistics.median(o / r for r, o in pairs)


def row(name: str, pairs: list[tuple[float, float]]) -> str:
    ratios = [o / r for r, o in pairs]
    return (
        f"{name:<36} {median([r for r, _ in pairs]):>8.2f} {median([o for _, o in pairs]):>8.2f}  "
        f"{paired_ratio(pairs):.3f}× ({min(ratios):.3f}–{max(ratios):.3f})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="arithmetic", help="an offline task (default arithmetic)")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared preset")
    quick = {"limit": 4, "reps": 1, "preset": QUICK_PRESET, "task": "ordering"}  # ≤ 16 tokens
    args = parse_args(parser, quick)
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    # The children's environment here too: the engine arguments evalpipe derives depend on it
    # (VLLM_CPU_KVCACHE_SPACE replaces the CPU KV cache default).
    os.environ.update(VLLM_ENV)
    spec = reference_spec(args.preset, args.task, args.limit)
    print(
        f"preset {args.preset}, task {args.task}: {len(spec['prompts'])} prompts, "
        f"sampling {spec['sampling']}, LLM({spec['llm']})"
    )
    env = child_env(**VLLM_ENV)
    raws: list[dict[str, Any]] = []
    ours: list[EvalpipeRun] = []
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-overhead-") as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        interleave(
            {
                "evalpipe run": lambda: ours.append(
                    evalpipe_run(
                        args.preset, args.task, args.limit, Path(tmp) / f"run-{len(ours)}", env
                    )
                ),
                "raw LLM script": lambda: raws.append(
                    raw_run(spec_path, Path(tmp) / f"raw-{len(raws)}.json", env)
                ),
            },
            args.reps,
        )
        same_text, same_tokens, diffs = compare(spec, raws[0], ours[0])
        n = len(spec["prompts"])
        sides = {
            "raw": dict(zip(spec["sample_ids"], raws[0]["texts"], strict=True)),
            "evalpipe": {s["sample_id"]: s["completions"] for s in ours[0].samples},
        }
        # Untimed, after the timed sides, and only where texts differ.
        tallies = (
            near_ties(
                {s["sample_id"]: s["prompt"] for s in ours[0].samples},
                sides,
                reference_run(
                    args.preset, args.task, args.limit, Path(tmp) / "reference", VLLM_ENV
                ),
            )
            if same_text < n
            else {}
        )

    mismatched = [r for r in ours if r.engine.get("engine_kwargs") != spec["llm"]]

    raw_tokens = sum(c[0] for c in raws[0]["completion_tokens"])
    our_tokens = ours[0].generated_tokens
    # Per repetition: (raw, evalpipe) for each figure.
    load = [(r["import_s"] + r["llm_s"], o.phase("load")) for r, o in zip(raws, ours, strict=True)]
    gen = [(r["generate_s"], o.phase("generate")) for r, o in zip(raws, ours, strict=True)]
    wall = [(r["timing"].wall_s, o.timing.wall_s) for r, o in zip(raws, ours, strict=True)]
    figures = {
        "generation phase": gen,
        "model load (import vllm + LLM())": load,
        "end to end without the model load": [
            (rw - rl, ow - ol) for (rw, ow), (rl, ol) in zip(wall, load, strict=True)
        ],
        "end to end with the model load": wall,
        # Interpreter, imports, prompts, engine shutdown, exit; evalpipe adds tasks, scoring,
        # manifest, monitor, summary.
        "outside model load and generation": [
            (rw - rl - rg, ow - ol - og)
            for (rw, ow), (rl, ol), (rg, og) in zip(wall, load, gen, strict=True)
        ],
        "process CPU time": [
            (r["timing"].cpu_s, o.timing.cpu_s) for r, o in zip(raws, ours, strict=True)
        ],
    }
    print(
        f"\n{f'figure (s; medians of {args.reps})':<36} {'raw':>8} {'evalpipe':>8}  ratio (range)"
    )
    for name, pairs in figures.items():
        print(row(name, pairs))
    for name, seconds in (("generation phase", gen), ("end to end", wall)):
        rates = [(raw_tokens / r, our_tokens / o) for r, o in seconds]
        print(row(f"tokens/s, {name}", rates))
    other = [
        o.timing.wall_s - o.phase("load") - o.phase("generate") - o.phase("score") for o in ours
    ]
    print(
        f"\nevalpipe phases (medians): load {median([o for _, o in load]):.2f} s, generate "
        f"{median([o for _, o in gen]):.2f} s, "
        f"score {median([o.phase('score') for o in ours]):.3f} s, "
        f"rest of the process (interpreter, imports, tasks, manifest, monitor, summary) "
        f"{median(other):.2f} s"
    )
    print(
        f"completions: {same_text}/{n} identical texts, {same_tokens}/{n} identical token counts "
        f"({raw_tokens} tokens raw, {our_tokens} evalpipe); engine arguments identical in "
        f"{len(ours) - len(mismatched)}/{len(ours)} runs"
    )
    for diff in diffs:
        print(f"  differs: {diff}")
    if tallies:
        print("near-tie rule against evalpipe's reference run (top-2 log-probabilities):")
    for name, found in tallies.items():
        print("\n".join(f"  {name}: {line}" for line in found.lines()))
    print()
    for name, pairs, target in (
        ("generation phase", gen, GENERATE_TARGET),
        (
            "end to end without the model load",
            figures["end to end without the model load"],
            E2E_TARGET,
        ),
    ):
        ratio = paired_ratio(pairs)
        print(f"target {name} ≤ {target}×: {ratio:.3f}×, {verdict(ratio, target)}")
    print(f"at end: {load_average()}")
    texts_agree = all(found.agrees for found in tallies.values())
    return 0 if texts_agree and not mismatched else 1


if __name__ == "__main__":
    raise SystemExit(main())
