"""RULER (the `ruler` kind): its scores equal RULER's own evaluate.py on fixture predictions
written here; the generators run with the arguments RULER's prepare.py gives them; lengths
below RULER's shortest or beyond the model's context refused; the context sized from the Ask;
the table in `evalpipe report`. Samples byte-equal to prepare.py's with a real tokenizer:
bench/ruler_agreement.py (tests/test_bench_quick.py)."""

from __future__ import annotations

import csv
import json
import os
import random
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.catalog.budgets import fit_context
from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import RULER_TASKS, TaskRef
from evalpipe.core.errors import ConfigError
from evalpipe.records.sampling import SamplingSettings
from evalpipe.reports.ruler import ruler_tables
from evalpipe.rundir.kindresults import write_kind_results
from evalpipe.rundir.layout import RunDir
from evalpipe.tasks.base import Sample
from evalpipe.tasks.ruler import generate
from evalpipe.tasks.ruler.install import package_path, ruler_dir
from evalpipe.tasks.ruler.kind import KIND, SEED, RulerTask, check_lengths, ruler_document

PER_TASK = 40  # fixture predictions per task: 520 in all
TOKENIZER = "/models/some tokenizer"  # never read here: the generators are not run


def ruler_task(name: str, length: int = 4096) -> RulerTask:
    return RulerTask(
        name=f"ruler_{name}_{length}", ruler_task=name, length=length, tokenizer=TOKENIZER,
        sampling=SamplingSettings(max_tokens=generate.generator(name).tokens_to_generate),
    )  # fmt: skip


def fixtures(rng: random.Random) -> list[tuple[str, list[str]]]:
    """(prediction, references): references of 1 to 10 needles (numbers, words, uuid-like),
    predictions holding some of them, in other case, with control characters, padding and
    distractors, or none."""
    out = []
    for _ in range(PER_TASK):
        refs = [
            rng.choice([str(rng.randint(10**6, 10**7 - 1)), f"word{rng.randint(0, 999)}-Noun",
                        f"{rng.getrandbits(32):08x}-ab12"])
            for _ in range(rng.choice([1, 1, 2, 3, 4, 5, 10]))
        ]  # fmt: skip
        said = [r.upper() if rng.random() < 0.2 else r for r in refs if rng.random() < 0.6]
        words = [*said, *rng.sample(["and", "the", "7", "Noun", "\x07", "\t\n", "ab12"], 3)]
        rng.shuffle(words)
        pred = rng.choice(["", "  ", "\x00"]) + " ".join(words) + rng.choice(["", " \x1f", "\n"])
        out.append((pred, refs))
    return out


def test_scores_equal_rulers_evaluate_on_fixtures(tmp_path: Path) -> None:
    rng = random.Random(42)
    data = tmp_path / "pred"
    data.mkdir()
    evalpipe_scores = {}
    tasks = {}
    for name in RULER_TASKS:
        task = ruler_task(name)
        rows = fixtures(rng)
        samples = [Sample(id=str(i), prompt="p", target={"outputs": refs}) for i, (_, refs) in
                   enumerate(rows)]  # fmt: skip
        scored = task.score_many([(s, [pred]) for s, (pred, _) in zip(samples, rows, strict=True)])
        evalpipe_scores[task.name] = [
            (s.id, x.scores) for s, x in zip(samples, scored, strict=True)
        ]
        tasks[task.name] = (name, task.length, task.metric.name)
        with (data / f"{name}.jsonl").open("w") as out:
            for i, (pred, refs) in enumerate(rows):
                line = {"index": i, "input": "p", "outputs": refs, "pred": pred, "others": {}}
                out.write(json.dumps(line) + "\n")
    assert sum(len(v) for v in evalpipe_scores.values()) >= 500
    # RULER's evaluate.py as a process: its nltk.download at import finds a punkt folder here.
    (tmp_path / "nltk" / "tokenizers" / "punkt").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ruler_dir()), "NLTK_DATA": str(tmp_path / "nltk")}
    done = subprocess.run(
        [sys.executable, str(package_path("eval/evaluate.py")), "--data_dir", str(data),
         "--benchmark", "synthetic"],
        cwd=package_path("eval"), env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with (data / "summary.csv").open() as handle:
        rows = list(csv.reader(handle))[1:]
    theirs = dict(zip(rows[0][1:], map(float, rows[1][1:]), strict=True))
    per_sample = json.loads((data / "per_sample_scores.json").read_text())

    document = ruler_document(tasks, evalpipe_scores)
    ours = {name: row["4096"]["score"] for name, row in document["scores"].items()}
    assert ours == theirs
    assert set(ours) == set(RULER_TASKS)
    for name in RULER_TASKS:  # each sample's value, on RULER's 0-100 scale
        values = [
            x[ruler_task(name).metric.name] * 100 for _, x in evalpipe_scores[f"ruler_{name}_4096"]
        ]
        assert values == per_sample[name], name
    assert min(ours.values()) > 0 and max(ours.values()) < 100  # the fixtures are mixed
    assert document["average"]["4096"] == round(sum(ours.values()) / len(ours), 2)


def test_generators_run_as_prepare_runs_them(tmp_path: Path) -> None:
    """prepare.py's own command line for two tasks (its `python` here a stand-in that records
    its arguments) is the one evalpipe runs, with the seed prepare.py uses for one chunk. (A
    path with a space is split by prepare.py's shell line; evalpipe passes argv.)"""
    tokenizer = "/models/tokenizer"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python"
    stub.write_text('#!/bin/sh\nprintf "%s\\0" "$@" > "$ARGV_FILE"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    for name in ("niah_single_1", "qa_1"):
        argv_file = tmp_path / f"{name}.argv"
        env = {**generate.generator_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "ARGV_FILE": str(argv_file)}  # fmt: skip
        subprocess.run(
            [sys.executable, str(package_path("data/prepare.py")), "--save_dir", str(tmp_path),
             "--task", name, "--tokenizer_path", tokenizer, "--tokenizer_type", "hf",
             "--max_seq_length", "4032", "--num_samples", "3"],
            cwd=package_path("data"), env=env, capture_output=True, check=True,
        )  # fmt: skip
        theirs = argv_file.read_bytes().decode().split("\0")[:-1]
        ours = generate.command(generate.generator(name), save_dir=tmp_path, tokenizer=tokenizer,
                                max_seq_length=4032, seed=SEED, count=3)  # fmt: skip
        assert theirs == ours[1:], name  # the interpreter aside: prepare.py's is `python`
        assert generate.max_seq_length(4096) == 4032


def test_lengths_refused_with_the_fix() -> None:
    smollm2 = load_preset("smollm2_135m")  # max_position_embeddings 8192
    assert check_lengths(smollm2, None) == (4096, 8192)
    assert check_lengths(smollm2, (8192, 4096, 8192)) == (4096, 8192)
    with pytest.raises(ConfigError, match=r"--ruler-lengths 2048: below 4096, RULER's shortest"):
        check_lengths(smollm2, (2048, 4096))
    with pytest.raises(ConfigError, match=r"--ruler-lengths 16384: beyond the context of preset "
                       r"'smollm2_135m', max_position_embeddings 8192 tokens.*\(the default is "
                       r"4096,8192\)"):  # fmt: skip
        check_lengths(smollm2, (4096, 16384))
    with pytest.raises(ConfigError, match=r"context of .*2048 tokens, below RULER's shortest"):
        check_lengths(load_preset("tiny_random"), None)
    # A preset with the card's rope scaling reaches its scaled length (Qwen3: YaRN to 131,072).
    qwen3 = load_preset("qwen3_32b")
    assert check_lengths(qwen3, None)[-1] == 131072
    with pytest.raises(ConfigError, match=r"262144: beyond .*131072 with rope scaling"):
        check_lengths(qwen3, (262144,))


def test_the_ask_sizes_the_context_to_the_length() -> None:
    """Prompt and answer within the length less the template's margin, which the context rule
    adds back: 8192 on SmolLM2 (8192 tokens) fits without capping any budget."""
    smollm2 = load_preset("smollm2_135m")
    tasks = [
        ruler_task(name, length) for name in ("niah_single_1", "vt") for length in (4096, 8192)
    ]
    asks = [KIND.ask(t) for t in tasks]
    assert [a.allowance + a.answers for a in asks] == [4096, 8192, 4096, 8192]
    assert [a.prompt_tokens for a in asks] == [4096 - 64 - 128, 8192 - 64 - 128, 4096 - 64 - 30,
                                               8192 - 64 - 30]  # fmt: skip
    context = fit_context(smollm2, asks, None)
    assert context.max_model_len == 8192
    assert context.budgets == {t.name: t.sampling.max_tokens for t in tasks}


def test_ruler_and_its_task_list_parse() -> None:
    assert TaskRef.parse("ruler") == TaskRef(kind="ruler", name="ruler")
    assert TaskRef.parse("ruler:vt") == TaskRef(kind="ruler", name="vt")
    with pytest.raises(ConfigError, match=r"ruler has no 'niah'.*niah_single_1"):
        from evalpipe.catalog.taskrefs import expand_refs

        expand_refs(["ruler:niah"])


def test_the_table_in_the_report(tmp_path: Path) -> None:
    scores = {"ruler_vt_4096": [("1", {"string_match_all": 0.5}), ("0", {"string_match_all": 1.0})],
              "ruler_vt_8192": [("0", {"string_match_all": 0.0})],
              "ruler_qa_1_4096": [("0", {"string_match_part": 1.0})]}  # fmt: skip
    tasks = {"ruler_vt_4096": ("vt", 4096, "string_match_all"),
             "ruler_vt_8192": ("vt", 8192, "string_match_all"),
             "ruler_qa_1_4096": ("qa_1", 4096, "string_match_part")}  # fmt: skip
    document = ruler_document(tasks, scores)
    assert document["scores"] == {"vt": {"4096": {"score": 75.0, "n": 2},
                                         "8192": {"score": 0.0, "n": 1}},
                                  "qa_1": {"4096": {"score": 100.0, "n": 1}}}  # fmt: skip
    assert document["average"] == {"4096": 87.5, "8192": 0.0}
    run = tmp_path / "run-a"
    run.mkdir()
    write_kind_results(RunDir(run), "ruler", document)
    warnings: list[str] = []
    [table] = ruler_tables([run, tmp_path], warnings)
    assert table.header == ("task", "4096", "8192")
    assert table.rows == (("vt", "75.00", "0.00"), ("qa_1", "100.00", "—"),
                          ("average", "87.50", "0.00"))  # fmt: skip
    assert warnings == []
    # A merged array job's document, from its shards' own: the same table.
    assert KIND.merged_results({run: document}, scores) == document


@pytest.mark.bench
@pytest.mark.vllm
def test_smollm2_ruler_run(vllm_env: dict[str, str], tmp_path: Path) -> None:
    """SmolLM2 (8,192 tokens) through every RULER task at 4096 and 8192, two samples each, on
    the real engine: the context sized to 8192, the table kept and reported. Minutes: bench."""
    from evalpipe.catalog import weights
    from evalpipe.cli import main

    weights.prepare("smollm2_135m")
    out = tmp_path / "run"
    argv = ["run", "--preset", "smollm2_135m", "--tasks", "ruler", "--ruler-lengths",
            "4096,8192", "--limit", "2", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    document = json.loads(RunDir(out).kind_results("ruler").read_text())
    assert document["lengths"] == [4096, 8192]
    assert list(document["scores"]) == list(RULER_TASKS)
    assert all(cell["n"] == 2 for row in document["scores"].values() for cell in row.values())
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["engine"]["max_model_len"] == 8192  # the preset's: 2048
    [table] = ruler_tables([out], [])
    assert [row[0] for row in table.rows] == [*RULER_TASKS, "average"]


def test_the_pins_are_the_installed_lists() -> None:
    """RULER's pins, which a run checks the folder against, are what scripts/ruler.sh installs."""
    from evalpipe.tasks.ruler.install import RULER

    listed = Path(__file__).parent.parent / "bench" / "ruler_requirements.txt"
    lines = [line for line in listed.read_text().splitlines() if line and line[0] != "#"]
    assert dict(line.split("==") for line in lines) == RULER.pins


def test_the_samples_are_keyed_by_what_they_depend_on(tmp_path: Path) -> None:
    """Another tokenizer file, length or seed is another cache file and another definition (so
    a run's fingerprint refuses to resume across one); the package versions are part of both."""
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    task = RulerTask(name="ruler_vt_4096", ruler_task="vt", length=4096, tokenizer=str(folder),
                     sampling=SamplingSettings(max_tokens=30))  # fmt: skip

    def path_of(length: int = 4096, seed: int = SEED) -> Path:
        return generate.cache_path("vt", length=length, seed=seed, count=2, tokenizer=str(folder))

    before, path = task.definition(), path_of()
    assert before["seed"] == 42 and before["max_seq_length"] == 4032
    assert set(before["versions"]) == {"nvidia-long-context-eval", "tenacity", "wonderwords"}
    others = {path_of(length=8192), path_of(seed=7)}
    assert path not in others and len(others) == 2
    generate.tokenizer_identity.cache_clear()
    (folder / "tokenizer.json").write_text('{"changed": true}')
    assert task.definition()["tokenizer"] != before["tokenizer"]
    assert path_of() != path
    generate.tokenizer_identity.cache_clear()


def test_plan_lays_out_a_ruler_length_from_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --tasks ruler --ruler-lengths N` sizes the context without loading RULER (no
    tokenizer needed): 128k on Qwen3 with the card's rope scaling; beyond it, refused."""
    from evalpipe.cli import main

    argv = ["plan", "--preset", "qwen3_32b", "--gpu", "h100-80gb", "--tasks", "ruler",
            "--ruler-lengths", "131072", "--json"]  # fmt: skip
    assert main(argv) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["max_model_len"] == 131072 and planned["fits"]
    assert main([*argv[:-2], "262144"]) != 0
    assert "262144" in capsys.readouterr().err
