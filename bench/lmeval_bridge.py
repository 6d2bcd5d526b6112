"""An lm-eval task on evalpipe's runner (`--tasks lm_eval:NAME`) against lm-eval's own vLLM
backend (`lm_eval --model vllm`): the same task file, model, chat template and LLM() arguments,
each side a whole process, alternating. Wall time with its breakdown (start-up, task building,
model load, generation, scoring); the completions compared document by document under the
near-tie rule (tests/neartie.py), and lm-eval's scores where they agree.

    python bench/lmeval_bridge.py [--docs 512] [--max-tokens 128] [--mc 1024] [--reps 3]
    python bench/lmeval_bridge.py --quick   # 4 documents, 8 tokens, 4 questions, once

The tasks: generate_until over arithmetic questions of varied length written here, with
lm-eval's gsm8k filters and exact_match, and beside it (`--mc`, 0 for none) four-option
questions in mmlu's form (the letters' log-likelihoods, 5-shot), with the model's chat template
on both sides (`lm_eval --apply_chat_template`). On tiny_random (random weights) generations run
their full length. lm-eval gets the LLM() arguments evalpipe's engine records in its
manifest (on the CPU: whole prefills, chunked prefill off); it comes from .cache/bench-lm-eval
(scripts/lm-eval.sh) through bench/lm_eval_launcher.py, which also times its phases. Where
completions differ, a reference run in this process records evalpipe's top-2 log-probabilities
for the near-tie rule.
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
    evalpipe_run,
    interleave,
    lm_eval_model_args,
    load_average,
    machine,
    median,
    near_ties,
    parse_args,
    timed_run,
    verdict,
)
from lmeval_support import GSM8K_EXACT_MATCH, GSM8K_FILTERS, mean_of, task_file, write_jsonl

TARGET = 0.8
TASK = "bench_lmeval"
MC_TASK = "bench_lmeval_mc"  # MMLU's form: four options, answered by a letter, 5-shot
LETTERS = ("A", "B", "C", "D")
NEAR_TIE = 0.05  # nats between two options: bf16 kernels may rank them either way
FILTERS = tuple(f["name"] for f in GSM8K_FILTERS)


def write_tasks(folder: Path, docs: int, max_tokens: int, mc_docs: int) -> list[str]:
    """The generation task over `docs` questions and, with `mc_docs`, the multiple-choice task
    beside it; returns the tasks' names."""
    write_task(folder, docs, max_tokens)
    if not mc_docs:
        return [TASK]
    write_mc_task(folder, mc_docs)
    return [TASK, MC_TASK]


def write_mc_task(folder: Path, docs: int) -> None:
    """`docs` four-option questions in lm-eval's mmlu form (`doc_to_choice` the letters, 5-shot
    from a train split): each question's options are scored as the letters' log-likelihoods."""

    def row(i: int) -> dict[str, Any]:
        a, b = 2 + i % 23, 5 + i * 11 % 37
        options = [a * b, a * b + a, a * b - b, a + b]
        label = i % 4
        options[0], options[label] = options[label], options[0]
        return {"question": f"What is {a} times {b}?", "choices": [str(o) for o in options],
                "answer": label}  # fmt: skip

    test = write_jsonl(folder / "mc_test.jsonl", [row(i) for i in range(docs)])
    train = write_jsonl(folder / "mc_train.jsonl", [row(docs + i) for i in range(20)])
    options = "".join(f"\n{letter}. {{{{choices[{i}]}}}}" for i, letter in enumerate(LETTERS))
    task_file(folder, MC_TASK, {"train": train, "test": test}, training_split="train",
              fewshot_split="train", num_fewshot=5, output_type="multiple_choice",
              doc_to_text="{{question}}" + options + "\nAnswer:",
              doc_to_choice=list(LETTERS), doc_to_target="answer",
              metric_list=mean_of("acc"))  # fmt: skip


def write_task(folder: Path, docs: int, max_tokens: int) -> None:
    """`docs` questions of varied length (so prompt lengths vary) and the task file."""
    rows = []
    for i in range(docs):
        a, b, c = 3 + i % 17, 7 + i * 7 % 31, i % 5
        question = f"Sam has {a} red and {b} blue marbles" + (f", then loses {c}" if c else "")
        rows.append({"question": f"{question}. How many now?", "answer": str(a + b - c)})
    task_file(folder, TASK, {"test": write_jsonl(folder / "questions.jsonl", rows)},
              output_type="generate_until",
              doc_to_text="Question: {{question}} End with '#### N'.\nAnswer:",
              doc_to_target="{{answer}}",
              generation_kwargs={"until": ["Question:", "\n\n"], "max_gen_toks": max_tokens,
                                 "do_sample": False},
              filter_list=GSM8K_FILTERS, metric_list=[GSM8K_EXACT_MATCH])  # fmt: skip


def lm_eval_run(
    folder: Path, tasks: list[str], out: Path, engine: dict[str, Any], env: dict[str, str]
) -> dict:
    phases = out.with_suffix(".phases.json")
    argv = [sys.executable, str(REPO / "bench" / "lm_eval_launcher.py"), "run", "--model",
            "vllm", "--model_args", lm_eval_model_args(engine), "--tasks", ",".join(tasks),
            "--include_path", str(folder), "--apply_chat_template", "--fewshot_as_multiturn",
            "--batch_size", "auto", "--output_path", str(out), "--log_samples"]  # fmt: skip
    timing = timed_run(argv, env=dict(env, LM_EVAL_PHASES=str(phases)))
    (results_file,) = out.rglob("results_*.json")
    samples = {}
    for task in tasks:
        prefix = f"samples_{task}_"  # then lm-eval's timestamp (another task's name may follow)
        found = out.rglob(f"{prefix}*.jsonl")
        (samples_file,) = (f for f in found if f.name[len(prefix)].isdigit())
        samples[task] = [json.loads(line) for line in samples_file.read_text().splitlines()]
    return {
        "timing": timing,
        "phases": json.loads(phases.read_text()),
        "samples": samples,
        "results": json.loads(results_file.read_text())["results"],
    }


def lm_eval_results(run: Path) -> dict[str, Any]:
    """Each task's figures in evalpipe's lm_eval_results.json."""
    return json.loads((run / "lm_eval_results.json").read_text())["results"]


def record_reference(preset_name: str, folder: Path, docs: int, out: Path) -> Any:
    """evalpipe's run of the task in this process with every token's top-2 log-probabilities
    (neartie.record_run): the reference the near-tie rule reads."""
    from neartie import record_run
    from transformers import AutoTokenizer

    from evalpipe.catalog import weights
    from evalpipe.catalog.preset import load_preset
    from evalpipe.tasks.kindbase import LoadOptions
    from evalpipe.tasks.kinds import load_refs

    os.environ.update(VLLM_ENV)
    sys.path.append(str(LM_EVAL_DIR))
    preset = load_preset(preset_name)
    loaded, _ = load_refs([f"lm_eval:{folder}", f"lm_eval:{TASK}"],
                          LoadOptions(preset=preset, backend="vllm"))  # fmt: skip
    tasks = list(loaded.tasks)
    tokenizer = AutoTokenizer.from_pretrained(weights.model_source(preset))

    def decode(ids: Any) -> str:  # as the bridge asks vLLM to: special tokens kept
        return tokenizer.decode(list(ids), skip_special_tokens=False)

    return record_run(preset_name, tasks, out, limit=docs, decode=decode)


def task_samples(run: EvalpipeRun, task: str) -> list[dict[str, Any]]:
    return [s for s in run.samples if s["task"] == task]


def compare(
    peer: dict[str, Any], ours: EvalpipeRun, results: dict[str, Any], reference: Any
) -> list[str]:
    """How the completions and lm-eval's per-document scores agree (`results`: evalpipe's
    lm-eval figures); `reference()` records the near-tie reference, called only where
    completions differ."""
    mine = {int(s["sample_id"]): s for s in task_samples(ours, TASK)}
    peer_samples = peer["samples"][TASK]
    rows = {r["doc_id"]: r for r in peer_samples if r["filter"] == FILTERS[0]}
    theirs = {doc: row["resps"][0][0] for doc, row in rows.items()}
    same = {doc for doc, text in theirs.items() if text == mine[doc]["completions"][0]}
    lines = [f"completions: {len(same)}/{len(rows)} identical"]
    if len(same) < len(rows):
        lines.append("near-tie rule against evalpipe's reference run (top-2 log-probabilities):")
        samples = {s["sample_id"]: s for s in task_samples(ours, TASK)}
        sides = {
            "lm-eval's:  ": {sid: [theirs[int(sid)]] for sid in samples},
            "evalpipe's: ": {sid: s["completions"] for sid, s in samples.items()},
        }
        prompts = {sid: s["prompt"] for sid, s in samples.items()}
        for name, found in near_ties(prompts, sides, reference()).items():
            lines += ["  " + name + line for line in found.lines()]
    for name in FILTERS:
        scored = [r for r in peer_samples if r["filter"] == name and r["doc_id"] in same]
        alike = sum(
            r["exact_match"] == mine[r["doc_id"]]["scores"][f"exact_match,{name}"] for r in scored
        )
        lines.append(
            f"exact_match ({name}) on the identical completions: {alike}/{len(scored)} alike"
        )
    for name in FILTERS:
        for key in (f"exact_match,{name}", f"exact_match_stderr,{name}"):
            lines.append(_figure(key, peer["results"][TASK], results[TASK]))
    if MC_TASK in peer["samples"]:
        lines += compare_choices(peer, ours, results)
    return lines


def _figure(key: str, theirs: dict[str, Any], ours: dict[str, Any]) -> str:
    same = "equal" if theirs[key] == ours[key] else "differ"
    return f"{key}: lm-eval {theirs[key]}, evalpipe {ours[key]} ({same})"


def compare_choices(peer: dict[str, Any], ours: EvalpipeRun, results: dict[str, Any]) -> list[str]:
    """The multiple-choice task: each document's acc and the aggregate with its stderr. The
    letters' log-likelihoods come from decoding steps in evalpipe (one after the question, one
    after the newline lm-eval's split moves into every option) and from each option's prompt
    log-probabilities in lm-eval, so they may part in the last bits: a document whose
    acc differs counts as a near-tie when the two sides' choices lie within NEAR_TIE nats of
    each other on both sides."""
    mine = {int(s["sample_id"]): s for s in task_samples(ours, MC_TASK)}
    rows = {r["doc_id"]: r for r in peer["samples"][MC_TASK]}
    alike, tied, beyond, largest = 0, 0, 0, 0.0
    for doc, row in rows.items():
        theirs_ll = [float(resp[0]) for resp in row["filtered_resps"]]
        ours_ll = list(mine[doc]["option_logprobs"])
        largest = max(largest, *(abs(a - b) for a, b in zip(theirs_ll, ours_ll, strict=True)))
        if row["acc"] == mine[doc]["scores"]["acc,none"]:
            alike += 1
            continue
        picks = {max(range(len(LETTERS)), key=ll.__getitem__) for ll in (theirs_ll, ours_ll)}
        gaps = [abs(ll[i] - ll[j]) for ll in (theirs_ll, ours_ll) for i in picks for j in picks]
        tied, beyond = (tied + 1, beyond) if max(gaps) < NEAR_TIE else (tied, beyond + 1)
    lines = [f"acc ({MC_TASK}) per document: {alike}/{len(rows)} alike, {tied} part at a "
             f"near-tie (< {NEAR_TIE} nats), {beyond} elsewhere; options' log-likelihoods "
             f"differ by at most {largest:.4f} nats"]  # fmt: skip
    for key in ("acc,none", "acc_stderr,none"):
        lines.append(_figure(key, peer["results"][MC_TASK], results[MC_TASK]))
    return lines


def breakdown(ours: list[EvalpipeRun], peers: list[dict[str, Any]]) -> list[str]:
    """Each side's median wall and its phases."""
    wall = median([o.timing.wall_s for o in ours])
    load, generate, score = (median([o.phase(p) for o in ours]) for p in ("load", "generate",
                                                                          "score"))  # fmt: skip
    peer_wall = median([p["timing"].wall_s for p in peers])
    phase = {k: median([p["phases"][k] for p in peers]) for k in peers[0]["phases"]}
    return [
        f"evalpipe: wall {wall:.2f} s = start-up and task building "
        f"{wall - load - generate - score:.2f} s + model load {load:.2f} s + generation "
        f"{generate:.2f} s + scoring {score:.2f} s (generation {generate / wall:.0%} of its wall)",
        f"lm-eval:  wall {peer_wall:.2f} s = start-up {peer_wall - sum(phase.values()):.2f} s + "
        + " + ".join(f"{k} {v:.2f} s" for k, v in phase.items())
        + f" (generation {phase['generation'] / peer_wall:.0%} of its wall)",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=512, help="documents (generations)")
    parser.add_argument("--max-tokens", type=int, default=128, help="the task's max_gen_toks")
    parser.add_argument(
        "--mc",
        type=int,
        default=1024,
        help="multiple-choice questions beside them (mmlu's form; 0: none)",
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default=QUICK_PRESET, help="a prepared chat preset")
    args = parse_args(parser, {"docs": 4, "max_tokens": 8, "mc": 4, "reps": 1})
    if not (LM_EVAL_DIR / "lm_eval").is_dir():
        print(LM_EVAL_MISSING)
        return 1
    print(f"machine: {machine()}")
    print(f"at start: {load_average()}")
    env = child_env(**VLLM_ENV)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(LM_EVAL_DIR)])
    peer_env = dict(env, PYTHONPATH=os.pathsep.join([str(LM_EVAL_DIR), str(REPO)]))
    peers: list[dict[str, Any]] = []
    ours: list[EvalpipeRun] = []
    with tempfile.TemporaryDirectory(prefix="evalpipe-bench-lmeval-") as tmp:
        folder = Path(tmp)
        names = write_tasks(folder, args.docs, args.max_tokens, args.mc)
        print(f"preset {args.preset}, {args.docs} documents, max_gen_toks {args.max_tokens}, "
              f"{args.mc} multiple-choice questions")  # fmt: skip
        tasks = ",".join([f"lm_eval:{folder}", *(f"lm_eval:{name}" for name in names)])
        # evalpipe goes first in the first round: lm-eval gets the LLM() arguments its engine
        # recorded (every round's are checked to be the same below).
        interleave(
            {
                "evalpipe": lambda: ours.append(
                    evalpipe_run(args.preset, tasks, None, folder / f"run-{len(ours)}", env)
                ),
                "lm-eval": lambda: peers.append(
                    lm_eval_run(
                        folder,
                        names,
                        folder / f"lm-eval-{len(peers)}",
                        ours[0].engine["engine_kwargs"],
                        peer_env,
                    )
                ),
            },
            args.reps,
        )
        engine = ours[0].engine["engine_kwargs"]
        alike = sum(o.engine["engine_kwargs"] == engine for o in ours)
        print(f"\nlm-eval model_args {lm_eval_model_args(engine)} "
              f"(evalpipe's engine arguments identical in {alike}/{len(ours)} runs)")  # fmt: skip
        print(f"(medians of {args.reps}, each a whole process including the model load)")
        for line in breakdown(ours, peers):
            print(line)
        walls = [o.timing.wall_s for o in ours]
        ratios = [o / p["timing"].wall_s for o, p in zip(walls, peers, strict=True)]
        ratio = statistics.median(ratios)
        print(f"wall-time ratio evalpipe / lm-eval: {ratio:.3f} (per repetition "
              f"{', '.join(f'{r:.3f}' for r in ratios)})")  # fmt: skip
        generated = sum(len(s["completions"]) for s in task_samples(ours[0], TASK))
        print(f"generations: {generated} per run, {ours[0].generated_tokens} tokens (evalpipe)")
        if args.mc:
            print(f"multiple-choice questions: {args.mc} per run, {4 * args.mc} options")
        reference = lambda: record_reference(args.preset, folder, args.docs, folder / "ref")  # noqa: E731
        for line in compare(peers[0], ours[0], lm_eval_results(folder / "run-0"), reference):
            print(line)
    print(
        f"\ntarget evalpipe ≤ {TARGET}× lm-eval's wall time: {ratio:.3f}×, {verdict(ratio, TARGET)}"
    )
    print(f"at end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
