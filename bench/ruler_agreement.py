"""RULER: evalpipe's samples against RULER's own `prepare.py` for the same tokenizer, length and
seed, byte for byte.

    python bench/ruler_agreement.py          # every task at 4096 and 8192, 10 samples each
    python bench/ruler_agreement.py --quick  # niah_single_1 and vt at 4096, 2 samples each

evalpipe's side loads `ruler:TASK` for the preset (default smollm2_135m, whose tokenizer
`evalpipe models prepare smollm2_135m` builds) at each length and takes N samples: its
generator process writes the cached file. RULER's side runs nvidia-long-context-eval's
`data/prepare.py` (which runs the task's generator through the shell, seed 42 for its single
chunk) with the same tokenizer folder, `--tokenizer_type hf`, `--num_samples N` and
`--max_seq_length` the length less the chat template's margin (what evalpipe asks the
generator for; docs/ruler.md). Checked: the two files are byte-equal, and every evalpipe sample's
prompt and references equal the file's `input` and `outputs`. Exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import RULER_TASKS, TaskRef
from evalpipe.catalog.weights import prepare
from evalpipe.tasks.kindbase import LoadOptions
from evalpipe.tasks.ruler import generate
from evalpipe.tasks.ruler.install import package_path
from evalpipe.tasks.ruler.kind import KIND, SEED, RulerTask

QUICK = {"tasks": "niah_single_1,vt", "lengths": "4096", "samples": 2}


def reference_file(task: RulerTask, count: int, work: Path) -> Path:
    """RULER's prepare.py for `task`'s generator at its length: the file it wrote."""
    argv = [sys.executable, str(package_path("data/prepare.py")), "--save_dir", str(work),
            "--benchmark", "synthetic", "--task", task.ruler_task,
            "--tokenizer_path", task.tokenizer, "--tokenizer_type", generate.TOKENIZER_TYPE,
            "--max_seq_length", str(generate.max_seq_length(task.length)),
            "--num_samples", str(count)]  # fmt: skip
    # prepare.py runs `python GENERATOR` through the shell: this interpreter, first on PATH.
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**generate.generator_env(), "PATH": path}
    done = subprocess.run(argv, cwd=package_path("data"), env=env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    made = work / task.ruler_task / f"{generate.SUBSET}.jsonl"
    if not made.is_file():  # prepare.py prints a failed generator's error and exits 0
        raise SystemExit(f"prepare.py wrote no samples for {task.name}:\n{done.stdout[-3000:]}")
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2_135m")
    parser.add_argument("--tasks", default=",".join(RULER_TASKS))
    parser.add_argument("--lengths", default="4096,8192")
    parser.add_argument("--samples", type=int, default=10)
    args = benchlib.parse_args(parser, QUICK, argv)
    preset = load_preset(args.preset)
    prepare(preset.name)
    lengths = tuple(int(n) for n in args.lengths.split(","))
    refs = [(TaskRef(kind="ruler", name=name), None) for name in args.tasks.split(",")]
    tasks = KIND.load(refs, LoadOptions(preset=preset, ruler_lengths=lengths)).tasks
    assert SEED == 42, "prepare.py's seed for one chunk"
    files, prompts = [], []
    seconds = {"evalpipe": 0.0, "prepare.py": 0.0}
    for task in tasks:
        assert isinstance(task, RulerTask)
        start = time.perf_counter()
        samples = task.samples(args.samples)
        seconds["evalpipe"] += time.perf_counter() - start
        ours = generate.cache_path(task.ruler_task, length=task.length, seed=SEED,
                                   count=args.samples, tokenizer=task.tokenizer)  # fmt: skip
        with tempfile.TemporaryDirectory() as work:
            start = time.perf_counter()
            theirs = reference_file(task, args.samples, Path(work))
            seconds["prepare.py"] += time.perf_counter() - start
            expected = theirs.read_bytes()
        rows = [benchlib.json.loads(line) for line in expected.decode().splitlines()]
        equal = ours.read_bytes() == expected
        files.append("" if equal else task.name)
        prompts += [
            f"{task.name} sample {s.id}"
            for s, row in zip(samples, rows, strict=True)
            if s.prompt != row["input"] or s.target["outputs"] != row["outputs"]
        ]
        verdict = "byte-equal" if equal else "DIFFERS"
        size = f"{len(expected):,} bytes"
        print(f"{task.name}: {len(samples)} samples, {size}, {verdict}", flush=True)
    print(f"preset {preset.name}, seed {SEED}, {args.samples} samples per task and length")
    print(", ".join(f"{side} {s:.1f} s" for side, s in seconds.items()))
    return benchlib.print_checks({
        "files byte-equal": (len(files), [f for f in files if f]),
        "samples equal to the file's input and outputs": (len(tasks) * args.samples, prompts),
    })  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
