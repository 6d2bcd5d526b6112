"""Suites, AIME's sampled metrics and long budgets: `--tasks suite:NAME` expands to its tasks
with the suite's settings, maj@k/pass@k/avg@n agree with hand-counted references, and a budget
beyond the preset's context raises max_model_len up to the model's limit, then is capped."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_livecodebench import hub_cache

from evalpipe.catalog.budgets import Ask, fit_context
from evalpipe.catalog.clusters import load_cluster
from evalpipe.catalog.gpus import get_gpu
from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.suites import load_suite, suite_names
from evalpipe.catalog.taskrefs import AskGiven, check_selection, expand_refs, named_asks
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, UnknownNameError
from evalpipe.rundir.samplelog import read_json
from evalpipe.tasks import load_tasks
from evalpipe.tasks.math_metrics import majority_correct, sampled_scores

ROOT = Path(__file__).resolve().parent.parent

# AIME rows in the published schemas: HuggingFaceH4/aime_2024 (id, problem, solution, answer as
# a zero-padded string, url, year) and MathArena/aime_2025 (problem_idx, problem, answer int).
AIME = {
    "HuggingFaceH4/aime_2024": [
        {"id": 60 + i, "problem": f"What is {i} + {i}?", "solution": f"It is {2 * i}.",
         "answer": f"{2 * i:03d}", "url": "https://example.org/p", "year": "2024"}
        for i in range(1, 4)
    ],
    "MathArena/aime_2025": [
        {"problem_idx": i, "problem": f"What is {i} times 7?", "answer": 7 * i}
        for i in range(1, 4)
    ],
}  # fmt: skip


# The other tasks of reasoning-2026, from their own tests' fixtures (tests/fixtures/), served
# as the hub datasets their task files name: (dataset, configuration, split) → file.
FIXTURES = ROOT / "tests" / "fixtures"
SERVED = {
    ("Idavidrein/gpqa", "gpqa_diamond", "train"): FIXTURES / "gpqa_diamond" / "train.jsonl",
    ("TIGER-Lab/MMLU-Pro", "default", "test"): FIXTURES / "mmlu_pro" / "test.jsonl",
    ("TIGER-Lab/MMLU-Pro", "default", "validation"): FIXTURES / "mmlu_pro" / "validation.jsonl",
    ("google/IFEval", "default", "train"): FIXTURES / "ifeval" / "train.jsonl",
}


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's datasets as local hub-style repositories (`datasets` resolves ORG/NAME here)."""
    root = tmp_path_factory.mktemp("hub")
    files: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for name, rows in AIME.items():
        (root / name / "default").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), root / name / "default" / "train.parquet")
        files.setdefault(name, {})["default"] = [("train", "default/train.parquet")]
    for (name, config, split), source in SERVED.items():
        if source.is_file():
            (root / name / config).mkdir(parents=True, exist_ok=True)
            shutil.copy(source, root / name / config / f"{split}.jsonl")
            files.setdefault(name, {}).setdefault(config, []).append(
                (split, f"{config}/{split}.jsonl")
            )
    for name, configs in files.items():
        card = "".join(
            f"- config_name: {config}\n  data_files:\n"
            + "".join(f"  - split: {split}\n    path: {path}\n" for split, path in splits)
            for config, splits in configs.items()
        )
        (root / name / "README.md").write_text(f"---\nconfigs:\n{card}---\n")
    return root


# -- maj@k, pass@k, avg@n against hand-counted references -----------------------------------


def test_majority_ties_go_to_the_answer_seen_first_as_lighteval() -> None:
    # votes: 7, 3, 3, 7 → a tie at two each; 7 occurs first, so 7 is the majority.
    correct, votes = [True, False, False, True], ["7", "3", "3", "7"]
    assert majority_correct(correct, votes, 4) is True
    assert majority_correct(correct, votes, 3) is False  # 7, 3, 3 → 3 (wrong)
    assert majority_correct(correct, votes, 1) is True
    # No answer is a vote too, and never right: 2 × none beat one right answer.
    assert majority_correct([False, False, True], [None, None, "5"], 3) is False


def test_sampled_scores_name_and_count_as_the_definitions() -> None:
    correct = [True, False, False, True]  # c = 2 of n = 4
    scores = sampled_scores(correct, ["7", "3", "3", "7"], ks=(1, 2, 4))
    assert scores == {
        "avg@4": 0.5,
        "pass@2": 1 - 1 / 6,  # 1 - C(2,2)/C(4,2)
        "pass@4": 1.0,
        "maj@2": 1.0,  # 7, 3 → tie, 7 first
        "maj@4": 1.0,
    }
    assert sampled_scores([True], ["7"], ks=(1,)) == {"accuracy": 1.0}  # n = 1: as before


def test_aime_scores_16_completions_with_math_verify(hub: Path) -> None:
    [task] = load_tasks(tasks=["aime2024"])
    assert task.metrics == ("avg@16", "pass@16", "maj@16")
    target = {"answer": "025"}  # zero-padded as published
    texts = ["so \\boxed{25}"] * 5 + ["\\boxed{24}"] * 6 + ["no answer"] * 5
    from evalpipe.tasks.base import Sample

    [scored] = task.score_many([(Sample(id="x", prompt="q", target=target), texts)])
    assert scored.scores["avg@16"] == 5 / 16
    assert scored.scores["pass@16"] == 1.0
    assert scored.scores["maj@16"] == 0.0  # 24 wins six to five
    assert scored.extracted[0] == "25" and scored.extracted[-1] is None


def test_hmmt_february_2025_runs_on_the_aime_2025_protocol() -> None:
    hmmt, aime = load_tasks(tasks=["hmmt_feb2025", "aime2025"])
    assert hmmt.config.source.uri == "hf:MathArena/hmmt_feb_2025"
    assert hmmt.config.source.revision is None  # unpinned, as aime2025 (said in the file)
    for part in ("prompt", "sampling", "scorer", "fields"):
        assert getattr(hmmt.config, part) == getattr(aime.config, part), part
    # HMMT's answers are LaTeX expressions, compared with math-verify.
    texts = ["so \\boxed{\\dfrac{9}{4}}"] * 3 + ["\\boxed{2}"] * 13
    from evalpipe.tasks.base import Sample

    sample = Sample(id="x", prompt="q", target={"answer": "\\frac{9}{4}"})
    [scored] = hmmt.score_many([(sample, texts)])
    assert (scored.scores["avg@16"], scored.scores["pass@16"], scored.scores["maj@16"]) == (
        3 / 16,
        1.0,
        0.0,
    )


# -- suites ---------------------------------------------------------------------------------


def test_the_shipped_suite_names_the_2026_tasks_and_is_listed(capsys) -> None:
    assert "reasoning-2026" in suite_names()
    suite = load_suite("suite:reasoning-2026")
    names = [e.task for e in suite.tasks]
    assert names == ["aime2024", "aime2025", "gpqa_diamond", "mmlu_pro", "livecodebench", "ifeval"]
    assert {e.max_tokens for e in suite.tasks} == {32768}
    assert main(["tasks", "list"]) == exitcodes.OK
    listed = capsys.readouterr().out
    assert "Suites (--tasks suite:NAME)" in listed
    assert "reasoning-2026  aime2024,aime2025,gpqa_diamond" in listed


def test_a_user_suite_file_applies_its_settings(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    own = tmp_path / "tasks" / "sums.yaml"
    own.write_text(
        "category: math\nsource: {uri: 'generated:arithmetic', size: 4}\n"
        "prompt: {template: '{{ question }}'}\nsampling: {temperature: 0.7}\n"
        "scorer: {kind: math, k: [2]}\n"
    )
    path = tmp_path / "mine.yaml"
    path.write_text("tasks:\n  - task: tasks/sums.yaml\n    n: 4\n    max_tokens: 99\n"
                    "  - task: arithmetic\n")  # fmt: skip
    check_selection(None, [f"suite:{path}"])
    sums, arithmetic = load_tasks(tasks=[f"suite:{path}"])
    assert (sums.name, sums.sampling.n, sums.sampling.max_tokens) == ("sums", 4, 99)
    assert sums.definition()["sampling"]["n"] == 4  # part of the run's fingerprint
    assert sums.metrics == ("avg@4", "pass@2", "maj@2")
    assert arithmetic.config == load_tasks(tasks=["arithmetic"])[0].config
    asks = named_asks([f"suite:{path}"], AskGiven(max_tokens=50))
    assert [(a.name, a.n, a.max_tokens) for a in asks] == [("sums", 4, 50), ("arithmetic", 1, 50)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks: []\n", "tasks must list at least one task"),
        ("tasks: [{task: arithmetic}, {task: arithmetic}]\n", "task 'arithmetic' is listed twice"),
        ("tasks: [{task: arithmetic, n: 0}]\n", "n of task 'arithmetic' must be a positive"),
        ("tasks: [{tsak: arithmetic}]\n", "unknown key 'tsak'. Did you mean 'task'?"),
        ("tasks: [{task: arithmetic, n: 3}]\n", "n = 3 with temperature 0 gives 3 identical"),
        ("tasks: [{task: aritmetic}]\n", "Unknown task 'aritmetic'. Did you mean 'arithmetic'?"),
    ],
)
def test_bad_suites_are_refused_naming_the_fix(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=None) as error:
        check_selection(None, [f"suite:{path}"])
        load_tasks(tasks=[f"suite:{path}"])
    assert message in str(error.value)


def test_an_unknown_suite_gets_the_closest_name() -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'reasoning-2026'"):
        check_selection(None, ["suite:reasoning2026"])


# -- long budgets ---------------------------------------------------------------------------


def test_a_long_budget_raises_max_model_len_up_to_the_model_then_is_capped() -> None:
    qwen3 = load_preset("qwen3_32b")  # max_model_len 16384; 131,072 positions with its YaRN
    # No recorded prompt size: 64 tokens of chat template + 1,024 for the prompt.
    aime = Ask(name="aime2024", max_tokens=32768, template_bytes=90)
    context = fit_context(qwen3, [aime], None)
    assert context.max_model_len == 32768 + 1088 and context.budgets == {"aime2024": 32768}
    assert context.notes[0].startswith("max_model_len 33856 (preset: 16384)")
    longer = Ask(name="long", max_tokens=160000, prompt_bytes=500)
    context = fit_context(qwen3, [aime, longer], None)
    assert context.max_model_len == 131072  # the model's limit, with its rope scaling
    assert context.budgets == {"aime2024": 32768, "long": 131072 - 564}
    assert "long: budget capped at 130508 tokens (asked: 160000)" in context.notes[1]
    given = fit_context(qwen3, [aime], 16384)  # --max-model-len wins, the budget is capped
    assert given.budgets == {"aime2024": 16384 - 1088}
    assert "to fit max_model_len 16384, --max-model-len" in given.notes[0]
    # Short budgets never move the context, whatever their prompts may take.
    short = Ask(name="gsm8k", max_tokens=384, template_bytes=40)
    assert fit_context(load_preset("tiny_random"), [short], None).max_model_len == 1024
    ranked = Ask(name="mmlu", max_tokens=256, generates=False)  # nothing generated
    assert fit_context(qwen3, [ranked], None).max_model_len == 16384
    # A prompt counted in tokens (generated for the tokenizer) is sized as it is, not by bytes.
    counted = Ask(name="ruler", max_tokens=128, prompt_tokens=32000, prompt_bytes=150000)
    assert fit_context(qwen3, [counted], None).max_model_len == 64 + 32000 + 128


def test_render_shows_each_task_with_n_budget_and_the_raised_context(
    tmp_path: Path, capsys
) -> None:
    suite = "reasoning-2026"
    argv = ["render", "--preset", "qwen3_32b", "--cluster", "example-h100-site",
            "--tasks", f"suite:{suite},gsm8k", "--out", "/scratch/r"]  # fmt: skip
    assert main(argv) == exitcodes.OK
    done = capsys.readouterr()
    length = int(done.out.split("--max-model-len ")[1].split()[0])
    assert 32768 < length <= 40960  # raised for the budget, within the model's limit
    rows = {line.split()[0]: line.split()[1:] for line in done.err.splitlines() if line}
    for task in load_suite(f"suite:{suite}").tasks:
        n = load_tasks(tasks=[task.task])[0].sampling.n
        assert rows[task.task][:2] == [str(n), "32768"]
    assert rows["aime2024"][:2] == ["16", "32768"] and rows["gsm8k"][:2] == ["1", "384"]
    context = (
        f"max_model_len {length} (preset: 16384; the model's ceiling: 131072 with rope scaling "
        "(yarn factor 4 over 32768 tokens))"
    )
    assert context in done.err


REASONING_2026 = ["aime2024", "aime2025", "gpqa_diamond", "mmlu_pro", "livecodebench", "ifeval"]
CARD_2026 = [*REASONING_2026, "hmmt_feb2025", "hle", "simpleqa", "bfcl", "tau2", "ruler"]


def test_card_2026_holds_the_card_s_tasks_and_tools_2026_holds_tau2() -> None:
    card = expand_refs(["suite:card-2026"])
    assert [str(ref) for ref, _ in card] == CARD_2026
    assert [(ref.kind, entry and entry.max_tokens) for ref, entry in card][5:] == [
        ("file", 32768), ("file", None), ("hle", None), ("simpleqa", None), ("bfcl", None),
        ("tau2", None), ("ruler", None),
    ]  # fmt: skip
    assert [str(ref) for ref, _ in expand_refs(["suite:tools-2026"])] == ["bfcl", "tau2"]


def _render_rows(capsys, *flags: str) -> tuple[dict[str, list[str]], str]:
    argv = ["render", "--preset", "qwen3_32b", "--cluster", "example-h100-site", "--tasks",
            "suite:card-2026", *flags, "--out", "/scratch/r"]  # fmt: skip
    assert main(argv) == exitcodes.OK
    err = capsys.readouterr().err
    table = err.split("\nmax_model_len")[0].splitlines()
    assert table[0].split("  ")[0] == "task" and max(map(len, table)) <= 100
    cells = [re.split(r"\s{2,}", row.strip()) for row in table[2:]]
    return {name: rest for name, *rest in cells}, err


def test_render_shows_every_task_of_the_card_with_protocol_budget_and_judge(capsys) -> None:
    rows, err = _render_rows(capsys)
    # RULER's rows size the context only: its default lengths run to the model's whole context.
    assert list(rows) == [*CARD_2026[:-1], "ruler@context"]
    assert rows["ruler@context"][:2] == ["-", "-"]
    assert "--max-model-len 131072" in err or "max_model_len 131072" in err
    for task in (*REASONING_2026, "hmmt_feb2025"):
        assert rows[task][1] == "32768", rows[task]
    assert rows["aime2024"] == ["16", "32768", "avg@16, math-verify (boxed)", "-"]
    assert rows["hmmt_feb2025"] == rows["aime2024"]  # AIME's protocol
    assert rows["gpqa_diamond"][2:] == ["choice letter (answer_line)", "-"]
    assert rows["livecodebench"][2:] == ["tests (livecodebench)", "-"]
    assert rows["hle"] == ["1", "8192", "judge, HLE's prompt, calibration", "needs --judge"]
    assert rows["simpleqa"][3] == "needs --judge"
    assert rows["bfcl"] == ["-", "-", "BFCL checker", "-"]
    assert rows["tau2"] == ["-", "-", "τ² evaluator, simulated user", "needs --user-sim"]
    assert "note: bfcl, tau2, ruler: n and max_tokens are their benchmark's" in err
    given, _ = _render_rows(capsys, "--judge", "qwen3_32b", "--user-sim", "qwen3_32b")
    assert given["hle"][3] == given["simpleqa"][3] == "qwen3_32b"
    assert given["tau2"][3] == "user: qwen3_32b" and given["aime2024"][3] == "-"


def test_a_task_file_s_protocol_follows_its_scorer_and_the_suite_s_n() -> None:
    from evalpipe.catalog.suites import SuiteEntry
    from evalpipe.catalog.taskrefs import TaskRef, protocol

    def said(name: str, entry: SuiteEntry | None = None, mc: str | None = None) -> str:
        return protocol(TaskRef(kind="file", name=name), entry, mc_method=mc)

    assert said("mmlu") == "choice log-likelihood"  # its file's method: logprobs
    assert said("gpqa_diamond", mc="logprobs") == "choice log-likelihood"
    assert said("humaneval") == "tests (humaneval)"
    assert said("gpqa_diamond", SuiteEntry(task="gpqa_diamond", n=4)).startswith("avg@4, choice")


def test_the_docs_show_the_card_s_table_as_render_prints_it(capsys) -> None:
    argv = ["render", "--preset", "qwen3_32b", "--cluster", "example-h100-site", "--tasks",
            "suite:card-2026", "--judge", "qwen3_32b", "--out", "/scratch/r"]  # fmt: skip
    assert main(argv) == exitcodes.OK
    printed = capsys.readouterr().err.split("evalpipe render:")[0]
    docs = (ROOT / "docs" / "tasks.md").read_text()
    shown = "".join(f"    {line}\n" for line in printed.splitlines())
    assert "`card-2026`" in docs and shown in docs


def test_a_raised_context_that_does_not_fit_falls_back_and_the_budget_is_capped() -> None:
    """qwen3_32b on one H100: 16,384 tokens fit beside the weights, AIME's 33,792 do not."""
    from evalpipe.catalog.selection import Selection
    from evalpipe.jobs.jobspec import JobOptions, make_jobspec
    from evalpipe.jobs.taskbudgets import budget_table
    from evalpipe.run.runoptions import RunnerOptions

    cluster = dataclasses.replace(load_cluster("local"), gpus_per_node=1, max_nodes=1)
    preset = load_preset("qwen3_32b")
    run = RunnerOptions(selection=Selection(tasks=("aime2024",)))
    spec = make_jobspec(
        preset=preset, preset_ref="qwen3_32b", cluster=cluster, gpu=get_gpu(cluster.gpu),
        options=JobOptions(run=run), run_dir="/scratch/r",
    )  # fmt: skip
    assert spec.plan.max_model_len == 16384 and spec.plan.fits
    shown = budget_table(preset, run.selection, spec.plan.max_model_len)
    budget = 16384 - 64 - 1024  # the chat template's and the prompt's allowance
    assert f"aime2024  16  {budget}" in shown
    assert f"aime2024: budget capped at {budget} tokens (asked: 32768)" in shown


def test_plan_estimate_sizes_the_raised_context_and_the_suite_s_budgets(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # no data and no past runs here: rows from the task files
    suite = tmp_path / "aime.yaml"
    suite.write_text("tasks: [{task: aime2024}, {task: aime2025, max_tokens: 20000}]\n")
    argv = ["plan", "--preset", "qwen3_32b", "--gpu", "h100-80gb", "--tasks",
            f"suite:{suite}", "--estimate"]  # fmt: skip
    assert main(argv) == exitcodes.OK
    shown = capsys.readouterr().out
    assert "at 33856 tokens" in shown  # the KV cache per sequence at the raised context
    assert "32768 × 16" in shown and "20000 × 16" in shown


def test_a_suite_runs_end_to_end_on_the_fake_engine(hub: Path, tmp_path: Path, monkeypatch) -> None:
    """AIME from the hub-style fixtures, through `evalpipe run`: every task with its sampled
    metrics and intervals, budgets capped by --max-tokens."""
    suite = tmp_path / "aime.yaml"
    suite.write_text("tasks: [{task: aime2024}, {task: aime2025, n: 4}]\n")
    out = tmp_path / "run"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(hub)
    argv = ["run", "--preset", "smollm2_135m", "--backend", "fake", "--tasks",
            f"suite:{suite}", "--limit", "2", "--max-tokens", "16", "--out", str(out)]  # fmt: skip
    assert main(argv) == exitcodes.OK
    summary = read_json(out / "summary.json")
    assert set(summary["tasks"]["aime2024"]["metrics"]) == {"avg@16", "pass@16", "maj@16"}
    assert set(summary["tasks"]["aime2025"]["metrics"]) == {"avg@4"}  # k 16 > n 4: none
    for task in summary["tasks"].values():
        assert task["n"] == 2
        for stats in task["metrics"].values():
            assert stats["ci_low"] <= stats["mean"] <= stats["ci_high"]
    sampling = read_json(out / "manifest.json")["config"]["sampling"]
    assert sampling["aime2024"]["max_tokens"] == 16 and sampling["aime2024"]["top_k"] == 20


def _check_run(run_dir: Path, tasks: list[str]) -> None:
    summary = read_json(run_dir / "summary.json")
    assert summary["complete"] and sorted(summary["tasks"]) == sorted(tasks)
    for name, task in summary["tasks"].items():
        assert task["n"] == 2, name
        assert task["metrics"], name
        for stats in task["metrics"].values():
            assert stats["ci_low"] <= stats["mean"] <= stats["ci_high"], name


SUITE = "reasoning-2026"
SELECTION = ["--preset", "smollm2_135m", "--tasks", f"suite:{SUITE}", "--limit", "2",
             "--max-tokens", "32"]  # fmt: skip


def _suite_env(
    hub: Path, tmp_path: Path, vllm_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """SmolLM2 prepared into the cache and this process set up as a job inherits it (sbatch
    --export=ALL): the fixtures' hub, LiveCodeBench's release files in a hub file cache, no
    downloads. The suite's task names."""
    from huggingface_hub import constants

    from evalpipe.catalog import weights

    weights.prepare("smollm2_135m")  # built once into the cache the job reads too
    hub_cache(tmp_path / "hub-cache")
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    env = {**vllm_env, "PATH": path, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets"),
           "HF_HUB_CACHE": str(tmp_path / "hub-cache")}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # This process imported the hub client already: its constants, as the job's will be.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", env["HF_HUB_CACHE"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(hub)
    return [e.task for e in load_suite(f"suite:{SUITE}").tasks]


# The suite end to end on the real CPU engine from the fixtures (--limit 2, budgets capped at
# 32 tokens), once through `evalpipe run` and once as a job on the local SLURM: two tests, so
# the run and the job go to different test workers.


@pytest.mark.vllm
def test_the_suite_runs_on_smollm2_through_run(
    hub: Path, tmp_path: Path, vllm_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = _suite_env(hub, tmp_path, vllm_env, monkeypatch)
    assert main(["run", *SELECTION, "--out", str(tmp_path / "local")]) == exitcodes.OK
    _check_run(tmp_path / "local", tasks)


@pytest.mark.vllm
@pytest.mark.slurm
def test_the_suite_runs_on_smollm2_through_the_local_slurm(
    hub: Path,
    tmp_path: Path,
    vllm_env: dict[str, str],
    local_slurm: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks = _suite_env(hub, tmp_path, vllm_env, monkeypatch)
    job = tmp_path / "job"
    # --no-check: the preflight looks for the datasets in the hub cache, and these fixtures are
    # local repositories (the weights were prepared by _suite_env).
    status = main(["submit", *SELECTION, "--cluster", "local", "--out", str(job), "--wait",
                   "--poll", "2", "--no-check"])  # fmt: skip
    logs = "".join(p.read_text() for p in (job / "logs").glob("*.out"))
    assert status == exitcodes.OK, logs[-3000:]
    _check_run(job, tasks)
