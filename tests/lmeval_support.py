"""lm-eval for the bridge's tests, and lm-eval task files over local JSON data written here.

lm-eval lives in .cache/bench-lm-eval (scripts/lm-eval.sh installs it there, apart from the
virtualenv: see docs/lmeval.md); it goes last on sys.path so the virtualenv's packages win, and
first on a child process's PYTHONPATH (`lm_eval_env`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

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

# generate_until with two regex filters (gsm8k's strict and flexible extraction), 2-shot.
ARITH_YAML = """\
task: ep_arith
dataset_path: json
dataset_kwargs:
  data_files:
    train: {data}/arith.jsonl
    test: {data}/arith.jsonl
training_split: train
test_split: test
fewshot_split: train
num_fewshot: 2
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["Question:", "\\n\\n"]
  max_gen_toks: 12
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
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
metadata:
  version: 1.0
"""

# Repeats with a majority vote over them (sampled).
VOTE_YAML = """\
task: ep_vote
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/arith.jsonl
test_split: test
output_type: generate_until
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: "{{{{answer.split('#### ')[-1]}}}}"
repeats: 3
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
  do_sample: true
  temperature: 0.8
filter_list:
  - name: maj@3
    filter:
      - function: regex
        regex_pattern: "(-?[0-9]+)"
      - function: majority_vote
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

# multiple_choice: two subtasks in one group with lm-eval's size-weighted mean (as mmlu).
MC_YAML = """\
task: ep_mc_{part}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/mc_{part}.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

GROUP_YAML = """\
group: ep_group
task:
  - ep_mc_a
  - ep_mc_b
aggregate_metric_list:
  - metric: acc
    aggregation: mean
    weight_by_size: true
  - metric: acc_norm
    aggregation: mean
    weight_by_size: true
metadata:
  version: 1.0
"""

# loglikelihood: lm-eval's `acc` is is_greedy, as lambada's.
CLOZE_YAML = """\
task: ep_cloze
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}/cloze.jsonl
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{' ' + text.split(' ')[-1]}}}}"
metric_list:
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""

TASKS = ("ep_arith", "ep_vote", "ep_group", "ep_cloze")


def write_tasks(folder: Path) -> Path:
    """lm-eval task files and their JSON data in `folder`; returns the folder."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    _jsonl(
        data / "arith.jsonl",
        [
            {"question": f"What is {a} + {b}?", "answer": f"{a} + {b} = {a + b}. #### {a + b}"}
            for a, b in ARITH
        ],
    )
    for part, numbers in (("a", range(10, 16)), ("b", range(40, 44))):
        _jsonl(
            data / f"mc_{part}.jsonl",
            [
                {
                    "question": f"Which number is larger than {n}?",
                    "choices": [str(n - 1), str(n + 1), f"{n - 2} or less"],
                    "label": 1,
                }
                for n in numbers
            ],
        )
    _jsonl(
        data / "cloze.jsonl",
        [{"text": f"The colour of the {thing} is {colour}"} for thing, colour in
         (("sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"))],
    )  # fmt: skip
    (folder / "ep_arith.yaml").write_text(ARITH_YAML.format(data=data))
    (folder / "ep_vote.yaml").write_text(VOTE_YAML.format(data=data))
    for part in ("a", "b"):
        (folder / f"ep_mc_{part}.yaml").write_text(MC_YAML.format(part=part, data=data))
    (folder / "ep_group.yaml").write_text(GROUP_YAML)
    (folder / "ep_cloze.yaml").write_text(CLOZE_YAML.format(data=data))
    return folder


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
