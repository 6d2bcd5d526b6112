"""RULER's samples for one task and length, made by nvidia-long-context-eval's own generators.

Each generator (`data/synthetic/<task>.py`) is an argparse script that runs at import, so it
runs as a child process with the arguments RULER's `prepare.py` gives it (read from the
package's synthetic.yaml and generator constants at run time), except the seed: prepare.py
ignores `--random_seed` (42 plus the chunk index), so evalpipe passes it to the script itself.
The generators count the prompt's tokens with the model's tokenizer but without its chat
template, so evalpipe asks them for the length less `TEMPLATE_TOKENS`, the margin the context
rule keeps for a template (evalpipe/catalog/budgets.py). The samples are cached per task,
length, seed, count, tokenizer (the hash of its files) and package versions.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalpipe.catalog.budgets import TEMPLATE_TOKENS
from evalpipe.catalog.weights import cache_dir
from evalpipe.core.errors import ConfigError, DatasetError
from evalpipe.tasks.punkt_data import use_punkt
from evalpipe.tasks.ruler.install import package_path, ruler_dir, versions

SUBSET = "validation"  # prepare.py's default; it only names the file
TOKENIZER_TYPE = "hf"  # the preset's tokenizer, through transformers' AutoTokenizer
# The files a Hugging Face tokenizer is read from: what the samples depend on.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "vocab.txt", "merges.txt",
                   "added_tokens.json")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Generator:
    """How prepare.py runs one RULER task's generator."""

    task: str  # synthetic.yaml's name (niah_single_1)
    script: str  # the generator it runs (niah)
    args: dict[str, Any]  # synthetic.yaml's args for it
    tokens_to_generate: int
    template: str  # the base model template around the task's, with its answer prefix


@functools.cache
def generator(task: str) -> Generator:
    """`task` as prepare.py configures it: synthetic.yaml's entry, the generator constants'
    template and answer prefix, inside template.py's `base` model template."""
    tasks = yaml.safe_load(package_path("synthetic.yaml").read_text(encoding="utf-8"))
    if task not in tasks:
        raise ConfigError(f"RULER has no task {task!r}; its tasks are {', '.join(tasks)}.")
    entry = tasks[task]
    base = _literal(package_path("data/synthetic/constants.py"), "TASKS")[entry["task"]]
    model_template = _literal(package_path("data/template.py"), "Templates")["base"]
    return Generator(
        task=task,
        script=entry["task"],
        args=dict(entry["args"]),
        tokens_to_generate=int(base["tokens_to_generate"]),
        template=model_template.format(task_template=base["template"])
        + base.get("answer_prefix", ""),
    )


def _literal(path: Path, name: str) -> Any:
    """The literal a module assigns to `name`, read without running the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise DatasetError(f"{path} assigns no {name}; reinstall nvidia-long-context-eval.")


def command(
    gen: Generator, *, save_dir: Path, tokenizer: str, max_seq_length: int, seed: int, count: int
) -> list[str]:
    """The generator's argv as prepare.py builds it (its shell line, split), with `seed`."""
    extra = [item for key, value in gen.args.items() for item in (f"--{key}", str(value))]
    return [
        sys.executable, str(package_path(f"data/synthetic/{gen.script}.py")),
        "--save_dir", str(save_dir), "--save_name", gen.task, "--subset", SUBSET,
        "--tokenizer_path", tokenizer, "--tokenizer_type", TOKENIZER_TYPE,
        "--max_seq_length", str(max_seq_length),
        "--tokens_to_generate", str(gen.tokens_to_generate),
        "--num_samples", str(count), "--random_seed", str(seed), *extra,
        *(["--pre_samples", "0"] if gen.script == "qa" else []),
        "--template", gen.template,
    ]  # fmt: skip


def generator_env() -> dict[str, str]:
    """The generators' environment: the package's folder on PYTHONPATH, and NLTK's Punkt model
    (the needle tasks split the essays into sentences) from the folder evalpipe writes."""
    return {**os.environ, "PYTHONPATH": str(ruler_dir()), "NLTK_DATA": str(use_punkt())}


def max_seq_length(length: int) -> int:
    """What the generators are asked for at `length`: the chat template's margin left."""
    return length - TEMPLATE_TOKENS


@functools.cache  # once a process: every task of a run asks, for its definition and its cache
def tokenizer_identity(tokenizer: str) -> str:
    """What a tokenizer's samples depend on: the hash of its files (a local folder), else the
    hub id it is read by."""
    folder = Path(tokenizer)
    if not folder.is_dir():
        return tokenizer
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + (folder / name).read_bytes())
    return f"sha256:{digest.hexdigest()}"


def cache_path(task: str, *, length: int, seed: int, count: int, tokenizer: str) -> Path:
    """Where the samples of `task` at `length` for `tokenizer` are kept: the generator's own
    file, named by what it depends on."""
    key = {"task": task, "max_seq_length": max_seq_length(length), "seed": seed, "count": count,
           "tokenizer": tokenizer_identity(tokenizer), "versions": versions()}  # fmt: skip
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / "ruler" / f"{task}-{length}-{digest}.jsonl"


def samples(task: str, *, length: int, seed: int, count: int, tokenizer: str) -> list[dict]:
    """`count` samples of RULER task `task` at `length` tokens for `tokenizer`, each as the
    generator writes it (index, input, outputs, length), from the cache or generated now."""
    path = cache_path(task, length=length, seed=seed, count=count, tokenizer=tokenizer)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="ruler-", dir=path.parent) as work:
            made = run_generator(task, Path(work), tokenizer=tokenizer, length=length,
                                 seed=seed, count=count)  # fmt: skip
            os.replace(made, path)  # a reader sees no file or the whole one
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def run_generator(
    task: str, save_dir: Path, *, tokenizer: str, length: int, seed: int, count: int
) -> Path:
    """Run `task`'s generator into `save_dir`; the file it wrote, or DatasetError with its
    error output."""
    argv = command(generator(task), save_dir=save_dir, tokenizer=tokenizer, seed=seed,
                   max_seq_length=max_seq_length(length), count=count)  # fmt: skip
    done = subprocess.run(argv, cwd=save_dir, env=generator_env(), capture_output=True,
                          text=True, check=False)  # fmt: skip
    made = save_dir / task / f"{SUBSET}.jsonl"
    if done.returncode != 0 or not made.is_file():
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise DatasetError(
            f"RULER's generator for {task} at {length} tokens failed (exit {done.returncode}):"
            f"\n{tail}"
        )
    return made
