"""lm-eval for the bridge's tests, and lm-eval task files over local JSON data written here: the
one builder of them (the lm-eval benches in bench/ write theirs with it too).

lm-eval lives in .cache/bench-lm-eval (scripts/lm-eval.sh installs it there, apart from the
virtualenv: see docs/lmeval.md); it goes last on sys.path so the virtualenv's packages win, and
first on a child process's PYTHONPATH (`lm_eval_env`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
LM_EVAL_DIR = REPO / ".cache" / "bench-lm-eval"


def use_lm_eval() -> None:
    """Make lm_eval importable in this process, or fail saying how to install it."""
    if not (LM_EVAL_DIR / "lm_eval").is_dir():
        raise RuntimeError(f"lm-eval is not installed in {LM_EVAL_DIR}; run `make setup`.")
    if str(LM_EVAL_DIR) not in sys.path:
        sys.path.append(str(LM_EVAL_DIR))
    # The tasks' datasets are local JSON files: nothing may be fetched.
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def lm_eval_env() -> dict[str, str]:
    """The environment of a child `evalpipe run` that loads lm-eval tasks."""
    use_lm_eval()
    path = os.pathsep.join(p for p in (str(REPO), str(LM_EVAL_DIR)) if p)
    return os.environ | {"PYTHONPATH": path}


ARITH = [(1, 2), (3, 4), (5, 6), (7, 8), (2, 2), (9, 1), (4, 4), (6, 3)]

# lm-eval's own gsm8k.yaml: its two filters (strict "#### N", flexible: the last number) and its
# exact_match, which ignores case, commas, "$", everything up to "#### " and a final ".".
GSM8K_FILTERS = [
    {"name": "strict-match", "filter": [
        {"function": "regex", "regex_pattern": r"#### (\-?[0-9\.\,]+)"},
        {"function": "take_first"}]},
    {"name": "flexible-extract", "filter": [
        {"function": "regex", "group_select": -1, "regex_pattern": r"(-?[$0-9.,]{2,})|(-?[0-9]+)"},
        {"function": "take_first"}]},
]  # fmt: skip
GSM8K_EXACT_MATCH = {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                     "ignore_case": True, "ignore_punctuation": False,
                     "regexes_to_ignore": [",", r"\$", "(?s).*#### ", r"\.$"]}  # fmt: skip


def mean_of(*metrics: str) -> list[dict[str, Any]]:
    return [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in metrics]


def task_file(folder: Path, name: str, data: Mapping[str, Path], **config: Any) -> Path:
    """The lm-eval task file `folder/NAME.yaml` over local JSON lines (`data`: split → file,
    one of them "test"), `config` the rest of its keys (output_type, doc_to_text, …)."""
    head = {"task": name, "dataset_path": "json",
            "dataset_kwargs": {"data_files": {split: str(path) for split, path in data.items()}},
            "test_split": "test"}  # fmt: skip
    return _yaml(folder / f"{name}.yaml", head | config | {"metadata": {"version": 1.0}})


def group_file(folder: Path, name: str, tasks: Sequence[str], metrics: Sequence[str]) -> Path:
    """An lm-eval group file: `tasks` with each metric's size-weighted mean (as mmlu)."""
    aggregate = [{"metric": m, "aggregation": "mean", "weight_by_size": True} for m in metrics]
    config = {"group": name, "task": list(tasks), "aggregate_metric_list": aggregate}
    return _yaml(folder / f"{name}.yaml", config | {"metadata": {"version": 1.0}})


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _yaml(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False), encoding="utf-8")
    return path


TASKS = ("ep_arith", "ep_vote", "ep_group", "ep_cloze")


def write_tasks(folder: Path) -> Path:
    """The tests' lm-eval tasks and their JSON data in `folder`; returns the folder.

    ep_arith: generate_until with gsm8k's filters, 2-shot. ep_vote: sampled repeats with a
    majority vote over them. ep_group: two multiple_choice tasks in a group with lm-eval's
    size-weighted mean (as mmlu). ep_cloze: loglikelihood, whose `acc` is is_greedy (lambada)."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    arith = write_jsonl(data / "arith.jsonl", [
        {"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}. #### {a + b}"}
        for a, b in ARITH])  # fmt: skip
    task_file(folder, "ep_arith", {"train": arith, "test": arith}, training_split="train",
              fewshot_split="train", num_fewshot=2, output_type="generate_until",
              doc_to_text="Question: {{question}}\nAnswer:", doc_to_target="{{answer}}",
              generation_kwargs={"until": ["Question:", "\n\n"], "max_gen_toks": 12,
                                 "do_sample": False},
              filter_list=GSM8K_FILTERS, metric_list=[GSM8K_EXACT_MATCH])  # fmt: skip
    task_file(folder, "ep_vote", {"test": arith}, output_type="generate_until",
              doc_to_text="Q: {{question}}\nA:", doc_to_target="{{answer.split('#### ')[-1]}}",
              repeats=3, generation_kwargs={"until": ["\n"], "max_gen_toks": 8,
                                            "do_sample": True, "temperature": 0.8},
              filter_list=[{"name": "maj@3", "filter": [
                  {"function": "regex", "regex_pattern": "(-?[0-9]+)"},
                  {"function": "majority_vote"}, {"function": "take_first"}]}],
              metric_list=mean_of("exact_match"))  # fmt: skip
    for part, numbers in (("a", range(10, 16)), ("b", range(40, 44))):
        questions = write_jsonl(data / f"mc_{part}.jsonl", [
            {"question": f"Which number is larger than {n}?",
             "choices": [str(n - 1), str(n + 1), f"{n - 2} or less"], "label": 1}
            for n in numbers])  # fmt: skip
        task_file(folder, f"ep_mc_{part}", {"test": questions}, output_type="multiple_choice",
                  doc_to_text="Question: {{question}}\nAnswer:", doc_to_choice="{{choices}}",
                  doc_to_target="label", metric_list=mean_of("acc", "acc_norm"))  # fmt: skip
    group_file(folder, "ep_group", ["ep_mc_a", "ep_mc_b"], ["acc", "acc_norm"])
    cloze = write_jsonl(data / "cloze.jsonl", [
        {"text": f"The colour of the {thing} is {colour}"} for thing, colour in
        (("sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"))])  # fmt: skip
    task_file(folder, "ep_cloze", {"test": cloze}, output_type="loglikelihood",
              doc_to_text="{{text.split(' ')[:-1]|join(' ')}}",
              doc_to_target="{{' ' + text.split(' ')[-1]}}",
              metric_list=[{"metric": "perplexity", "aggregation": "perplexity",
                            "higher_is_better": False}, *mean_of("acc")])  # fmt: skip
    return folder
