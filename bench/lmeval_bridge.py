"""An lm-eval task on evalpipe's runner (`--tasks lm_eval:NAME`) against lm-eval's own vLLM
backend: the same task file, model, chat template and engine arguments, each side a whole
process, alternating. Wall time with its breakdown (start-up, task building, model load,
generation, scoring), and whether the completions and lm-eval's scores agree document by document.

    python bench/lmeval_bridge.py [--docs 512] [--reps 2] [--preset smollm2_135m]
    python bench/lmeval_bridge.py --quick   # 4 documents on tiny_random, once

The task is generate_until over arithmetic questions written here (lm-eval's gsm8k filters:
strict "#### N" and flexible last number), applied with the model's chat template on both sides
(`lm_eval --apply_chat_template`). lm-eval comes from .cache/bench-lm-eval (scripts/lm-eval.sh)
through bench/lm_eval_launcher.py, which also times its phases.
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
    child_env,
    interleave,
    load_average,
    machine,
    median,
    parse_args,
    timed_run,
    verdict,
)

TARGET = 0.8
TASK = "bench_lmeval"
FILTERS = ("strict-match", "flexible-extract")
PHASES = ("load", "generate", "score")  # evalpipe's manifest timings
TASK_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}} End with '#### N'.\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["Question:", "\\n\\n"]
  max_gen_toks: {max_tokens}
  do_sample: false
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
metadata:
  version: 1.0
"""


def write_task(folder: Path, docs: int, max_tokens: int) -> None:
    """`docs` questions of varied length (so generation lengths vary) and the task file."""
    data = folder / "questions.jsonl"
    with data.open("w", encoding="utf-8") as fh:
        for i in range(docs):
            a, b, c = 3 + i % 17, 7 + i * 7 % 31, i % 5
            question = f"Sam has {a} red and {b} blue marbles" + (f", then loses {c}" if c else "")
            fh.write(json.dumps({"question": f"{question}. How many now?",
                                 "answer": str(a + b - c)}) + "\n")  # fmt: skip
    (folder / f"{TASK}.yaml").write_text(
        TASK_YAML.format(task=TASK, data=json.dumps(str(data)), max_tokens=max_tokens)
    )


def engine_args(preset_name: str) -> dict[str, Any]:
    """The LLM() arguments evalpipe's engine builds for the preset (lm-eval gets the same)."""
    from evalpipe.catalog import models
    from evalpipe.catalog.registry import load_preset
    from evalpipe.engine.base import EngineSettings
    from evalpipe.engine.vllm import llm_kwargs

    preset = load_preset(preset_name)
    return llm_kwargs(preset, EngineSettings(), models.model_source(preset))


def model_args(kwargs: dict[str, Any]) -> str:
    keys = ("dtype", "max_model_len", "seed", "gpu_memory_utilization", "enforce_eager")
    extra = [f"{k}={kwargs[k]}" for k in keys if kwargs.get(k) is not None]
    return ",".join([f"pretrained={kwargs['model']}", *extra])


def lm_eval_run(folder: Path, out: Path, kwargs: dict[str, Any], env: dict[str, str]) -> dict:
    phases = out.with_suffix(".phases.json")
    argv = [sys.executable, str(REPO / "bench" / "lm_eval_launcher.py"), "run", "--model",
            "vllm", "--model_args", model_args(kwargs), "--tasks", TASK, "--include_path",
            str(folder), "--apply_chat_template", "--fewshot_as_multiturn", "--batch_size",
            "auto", "--output_path", str(out), "--log_samples"]  # fmt: skip
    timing = timed_run(argv, env=dict(env, LM_EVAL_PHASES=str(phases)))
    (samples_file,) = out.rglob(f"samples_{TASK}_*.jsonl")
    (results_file,) = out.rglob("results_*.json")
    return {
        "timing": timing,
        "phases": json.loads(phases.read_text()),
        "samples": [json.loads(line) for line in samples_file.read_text().splitlines() if line],
        "results": json.loads(results_file.read_text())["results"][TASK],
    }


def evalpipe_run(preset: str, folder: Path, out: Path, env: dict[str, str]) -> EvalpipeRun:
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", preset, "--tasks",
            f"lm_eval:{folder},lm_eval:{TASK}", "--out", str(out)]  # fmt: skip
    timing = timed_run(argv, env=env)
    manifest = json.loads((out / "manifest.json").read_text())
    lines = (out / "samples.jsonl").read_text().splitlines()
    return EvalpipeRun(
        timing=timing,
        timings=manifest["timings"],
        samples=[json.loads(line) for line in lines if line.strip()],
        summary=json.loads((out / "lm_eval_results.json").read_text())["results"][TASK],
        engine=manifest.get("engine") or {},
    )


def compare(peer: dict[str, Any], ours: EvalpipeRun) -> list[str]:
    """How the completions and lm-eval's per-document scores agree."""
    mine = {int(s["sample_id"]): s for s in ours.samples}
    rows = [r for r in peer["samples"] if r["filter"] == FILTERS[0]]
    same = {r["doc_id"] for r in rows if r["resps"][0][0] == mine[r["doc_id"]]["completions"][0]}
    lines = [f"completions: {len(same)}/{len(rows)} identical"]
    lines += [
        f"  differ: doc {r['doc_id']}: lm-eval {r['resps'][0][0]!r} vs evalpipe "
        f"{mine[r['doc_id']]['completions'][0]!r}"
        for r in rows
        if r["doc_id"] not in same
    ][:2]
    for name in FILTERS:
        scored = [r for r in peer["samples"] if r["filter"] == name and r["doc_id"] in same]
        alike = sum(
            r["exact_match"] == mine[r["doc_id"]]["scores"][f"exact_match,{name}"] for r in scored
        )
        lines.append(
            f"exact_match ({name}) on the identical completions: {alike}/{len(scored)} alike"
        )
    for key in (f"exact_match,{FILTERS[0]}", f"exact_match_stderr,{FILTERS[0]}"):
        lines.append(f"{key}: lm-eval {peer['results'][key]}, evalpipe {ours.summary[key]}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=512, help="documents (generations)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--preset", default="smollm2_135m", help="a prepared chat preset")
    args = parse_args(parser, {"docs": 4, "max_tokens": 8, "reps": 1, "preset": QUICK_PRESET})
    if not (LM_EVAL_DIR / "lm_eval").is_dir():
        print(LM_EVAL_MISSING)
        return 1
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    env = child_env(**VLLM_ENV)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(LM_EVAL_DIR)])
    peer_env = dict(env, PYTHONPATH=os.pathsep.join([str(LM_EVAL_DIR), str(REPO)]))
    kwargs = engine_args(args.preset)
    peers: list[dict[str, Any]] = []
    ours: list[EvalpipeRun] = []
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-lmeval-") as tmp:
        folder = Path(tmp)
        write_task(folder, args.docs, args.max_tokens)
        print(f"preset {args.preset}, {args.docs} documents, max_gen_toks {args.max_tokens}, "
              f"lm-eval model_args {model_args(kwargs)}")  # fmt: skip
        interleave(
            {
                "evalpipe": lambda: ours.append(
                    evalpipe_run(args.preset, folder, folder / f"run-{len(ours)}", env)
                ),
                "lm-eval": lambda: peers.append(
                    lm_eval_run(folder, folder / f"lm-eval-{len(peers)}", kwargs, peer_env)
                ),
            },
            args.reps,
        )
    walls = [o.timing.wall_s for o in ours]
    peer_walls = [p["timing"].wall_s for p in peers]
    print(f"\n(medians of {args.reps}, each a whole process including the model load)")
    load, generate, score = (
        median([o.phase(p) for o in ours]) for p in ("load", "generate", "score")
    )
    print(
        f"evalpipe: wall {median(walls):.2f} s = start-up and task building "
        f"{median(walls) - load - generate - score:.2f} s + model load {load:.2f} s + "
        f"generation {generate:.2f} s + scoring {score:.2f} s"
    )
    phase = {k: median([p["phases"][k] for p in peers]) for k in peers[0]["phases"]}
    rest = median(peer_walls) - sum(phase.values())
    print(
        f"lm-eval:  wall {median(peer_walls):.2f} s = start-up {rest:.2f} s + "
        + " + ".join(f"{k} {v:.2f} s" for k, v in phase.items())
        + f" (generation {phase['generation'] / median(peer_walls):.0%} of its wall)"
    )
    ratios = [o / p for o, p in zip(walls, peer_walls, strict=True)]
    ratio = statistics.median(ratios)
    print(f"wall-time ratio evalpipe / lm-eval: {ratio:.3f} (per repetition "
          f"{', '.join(f'{r:.3f}' for r in ratios)})")  # fmt: skip
    for line in compare(peers[0], ours[0]):
        print(line)
    print(
        f"\ntarget evalpipe ≤ {TARGET}× lm-eval's wall time: {ratio:.3f}×, {verdict(ratio, TARGET)}"
    )
    print(f"at end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
