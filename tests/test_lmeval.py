"""The lm-eval bridge on the fake engine and lm-eval's own code: scores equal lm-eval's on the
same responses, runs resume after kill -9, lm_eval_results.json, refusals, no lm_eval import
without lm_eval: tasks."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lmeval_support import (
    TASKS,
    lm_eval_env,
    mean_of,
    task_file,
    use_lm_eval,
    write_jsonl,
    write_tasks,
)

from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.records.completion import Completion, Generation, Loglikelihood
from evalpipe.tasks.kindbase import LoadOptions
from evalpipe.tasks.kinds import load_refs
from evalpipe.tasks.lmeval import LmEvalTask
from evalpipe.tasks.lmeval.results import lm_eval_results

use_lm_eval()

BOOTSTRAP = 2000  # perplexity's bootstrapped stderr, in fewer draws than lm-eval's 100,000
REFERENCE_KEYS = ("results", "groups", "group_subtasks", "versions", "n-shot",
                  "higher_is_better", "n-samples")  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("lmeval-tasks"))


def load(*refs: str, **options: Any) -> list[Any]:
    """The tasks `refs` name, loaded through the kinds' registry as a run loads them."""
    return list(load_refs(refs, LoadOptions(**options))[0].tasks)


def _digest(*parts: object) -> int:
    return int(hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def scripted_lm() -> Any:
    """An lm-eval model answering from hashes: right and wrong sums, mixed log-likelihoods."""
    from lm_eval.api.model import LM

    class Scripted(LM):
        def __init__(self) -> None:
            super().__init__()
            self.seen: dict[str, int] = {}

        def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
            out = []
            for request in requests:
                context = request.args[0]
                repeat = self.seen[context] = self.seen.get(context, -1) + 1
                value = _digest(context, repeat) % 12
                shapes = (f" It is {value}. #### {value}", f" {value}", f" maybe {value}, or 3")
                out.append(shapes[_digest(context, repeat, "shape") % 3])
            return out

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return [
                (-(_digest(*r.args) % 900) / 100, _digest(*r.args, "greedy") % 3 == 0)
                for r in requests
            ]

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError

    return Scripted()


def _completion(task: LmEvalTask, sample_id: str, responses: list[list[Any]]) -> Completion:
    """The engine completion that carries lm-eval's logged responses for one document."""
    if task.output_type == "generate_until":
        (texts,) = responses
        return Completion(
            id=sample_id,
            generation=Generation(
                texts=tuple(texts), prompt_tokens=0, completion_tokens=(0,) * len(texts)
            ),
        )
    return Completion(
        id=sample_id,
        loglikelihoods=tuple(
            Loglikelihood(logprob=r[0][0], is_greedy=r[0][1], tokens=1, prompt_tokens=1)
            for r in responses
        ),
    )


def test_same_scores_on_the_same_responses(folder: Path) -> None:
    """lm-eval's logged responses through evalpipe's scoring path: every document's metrics,
    every aggregate and stderr, and the group's weighted mean equal lm-eval's exactly."""
    from lm_eval.evaluator import evaluate
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import handle_non_serializable

    manager = TaskManager(include_defaults=False, include_path=str(folder))
    reference = evaluate(
        scripted_lm(), manager.load(list(TASKS)), log_samples=True, bootstrap_iters=BOOTSTRAP
    )
    reference = json.loads(json.dumps(reference, default=handle_non_serializable))

    tasks = load(f"lm_eval:{folder}", *(f"lm_eval:{name}" for name in TASKS))
    assert sorted(t.name for t in tasks) == sorted(reference["results"].keys() - {"ep_group"})
    found: dict[str, list[tuple[str, dict[str, float]]]] = {}
    checked = 0
    for task in tasks:
        assert isinstance(task, LmEvalTask)
        samples = {s.id: s for s in task.samples()}
        logged = reference["samples"][task.name]
        first = {}
        for example in logged:
            first.setdefault(example["doc_id"], example)
        items = [
            (samples[str(doc_id)], _completion(task, str(doc_id), example["resps"]))
            for doc_id, example in sorted(first.items())
        ]
        scored = task.score_responses(items)
        by_doc = dict(zip(sorted(first), scored, strict=True))
        for example in logged:
            scores = by_doc[example["doc_id"]].scores
            for metric in example["metrics"]:
                assert scores[f"{metric},{example['filter']}"] == example[metric]
                checked += 1
        found[task.name] = [(str(doc_id), s.scores) for doc_id, s in by_doc.items()]
    assert checked == 52  # 2 filters × 8 + 8 + 2 metrics × (10 + 4)
    ours = lm_eval_results(tasks, found, bootstrap_iters=BOOTSTRAP)
    for key in REFERENCE_KEYS:
        assert ours[key] == reference[key], key
    assert ours["groups"]["ep_group"]["acc,none"] == pytest.approx(
        sum(reference["results"][t]["acc,none"] * n for t, n in (("ep_mc_a", 6), ("ep_mc_b", 4)))
        / 10
    )


def test_max_tokens_caps_an_lm_eval_task_and_its_context_is_fitted(folder: Path) -> None:
    """--max-tokens reaches lm-eval's tasks as lm-eval's `--gen_kwargs max_gen_toks=N` would;
    a budget beyond the context is capped to fit it."""
    from evalpipe.catalog.budgets import TEMPLATE_TOKENS
    from evalpipe.catalog.preset import load_preset
    from evalpipe.tasks.kinds import load_selection

    options = LoadOptions(preset=load_preset("tiny_random"), backend="fake")
    (capped,) = load_selection([f"lm_eval:{folder}/ep_arith.yaml"], options, max_tokens=5).tasks
    assert isinstance(capped, LmEvalTask) and capped.sampling.max_tokens == 5
    assert capped.sampling.stop == ("Question:", "\n\n")  # lm-eval's other settings kept
    # The context is fitted to lm-eval's own prompts (two-shot here) and the budget.
    (task,) = load(f"lm_eval:{folder}/ep_arith.yaml")
    prompt = TEMPLATE_TOKENS + max(len(str(s.prompt).encode()) for s in task.samples())
    for length, budget in ((prompt + 12, 12), (prompt + 6, 6)):
        chosen = load_selection([f"lm_eval:{folder}/ep_arith.yaml"], options, max_model_len=length)
        assert chosen.tasks[0].sampling.max_tokens == budget


def test_requests_one_sample_per_document(folder: Path) -> None:
    """Few-shot contexts as lm-eval builds them; options for scored types; sampling from the
    task's generation_kwargs with its repeats as n; --limit keeps the first documents."""
    tasks = {t.name: t for t in load(f"lm_eval:{folder}/ep_group.yaml",
                                     f"lm_eval:{folder}/ep_vote.yaml")}  # fmt: skip
    vote = tasks["ep_vote"]
    assert (vote.sampling.n, vote.sampling.temperature, vote.sampling.stop) == (3, 0.8, ("\n",))
    assert vote.sampling.skip_special_tokens is False  # as lm-eval's vLLM backend decodes
    assert [s.id for s in vote.samples(limit=3)] == ["0", "1", "2"]
    mc = tasks["ep_mc_b"].samples()
    assert [o.continuation for o in mc[0].options] == [" 39", " 41", " 38 or less"]
    assert mc[0].prompt == "Question: Which number is larger than 40?\nAnswer:"
    assert type(mc[0].prompt).__name__ == "Rendered"


def test_templates_compiled_once_render_as_lm_eval_does_and_are_restored() -> None:
    from lm_eval import utils

    from evalpipe.tasks.lmeval.task import templates_compiled_once

    original = utils.apply_template
    template = "{{question}}{% for c in choices %}\n{{ c | regex_replace('a', 'b') }}{% endfor %}"
    docs = [{"question": f"Q{i}?", "choices": ["a1", f"ca{i}"]} for i in range(3)]
    expected = [original(template, doc) for doc in docs]
    with templates_compiled_once():
        assert utils.apply_template is not original
        assert [utils.apply_template(template, doc) for doc in docs] == expected
    assert utils.apply_template is original


def test_lm_eval_tasks_mix_with_evalpipes_and_show_estimate(folder: Path) -> None:
    """evalpipe's own tasks and lm-eval's in one selection; `tasks show` prints lm-eval's
    prompt; `plan --estimate` counts lm-eval's documents; lm-eval's index is searched in the
    folder a name starts with."""
    from lm_eval.tasks import __file__ as shipped

    from evalpipe.tasks.lmeval.loader import _candidates

    chosen = load("arithmetic", f"lm_eval:{folder}/ep_cloze.yaml")
    assert [(t.name, t.category) for t in chosen] == [("arithmetic", "math"),
                                                      ("ep_cloze", "lm_eval")]  # fmt: skip
    assert _candidates(Path(shipped).parent, "arc_easy") == [Path(shipped).parent / "arc"]
    evalpipe = [sys.executable, "-m", "evalpipe"]
    shown = subprocess.run([*evalpipe, "tasks", "show", f"lm_eval:{folder}/ep_arith.yaml",
                            "--limit", "1"], env=lm_eval_env(), capture_output=True, text=True,
                           check=True).stdout  # fmt: skip
    assert json.loads(shown)["prompt"].count("Question:") == 3  # two shots and the question
    estimate = ["plan", "--preset", "tiny_random", "--gpu", "h100-80gb", "--estimate"]
    names = f"lm_eval:{folder},lm_eval:ep_group"
    plan = subprocess.run([*evalpipe, *estimate, "--tasks", names], env=lm_eval_env(),
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert re.search(r"ep_mc_a\s+6\s+\d+\s+ranked", plan), plan


def test_reasoning_is_kept_out_of_what_lm_eval_scores(folder: Path) -> None:
    """A reasoning preset's parser runs before lm-eval's filters: the number in the reasoning
    is not extracted, a completion cut off inside it is unanswered, and the results say so."""
    (task,) = load(f"lm_eval:{folder}/ep_arith.yaml", reasoning_parser="deepseek_r1")
    assert isinstance(task, LmEvalTask)
    sample = task.samples(limit=1)[0]  # 1 + 2
    texts = ("<think>#### 9?</think> It is 3. #### 3", "<think>#### 3, or")
    scored = task.score_responses(
        [(sample, _completion(task, sample.id, [[text]])) for text in texts]
    )
    assert [s.scores["exact_match,strict-match"] for s in scored] == [1.0, 0.0]
    assert [s.cut_off for s in scored] == [(False,), (True,)]
    results = lm_eval_results([task], {task.name: [(sample.id, scored[0].scores)]})
    assert results["evalpipe_reasoning_separated"] == {"ep_arith": "deepseek_r1"}


def test_unsupported_tasks_are_refused_before_anything_runs(tmp_path: Path) -> None:
    rolling = tmp_path / "ep_rolling.yaml"
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "a b c"}\n')
    rolling.write_text(
        f"task: ep_rolling\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: word_perplexity\n"
    )
    with pytest.raises(ConfigError, match="loglikelihood_rolling requests"):
        load(f"lm_eval:{rolling}")


def test_generation_kwargs_out_of_bounds_are_refused_naming_the_task(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"question": "1 + 1?", "answer": "2"}])
    task_file(tmp_path, "ep_bad_top_p", {"test": data}, output_type="generate_until",
              doc_to_text="{{question}}", doc_to_target="{{answer}}",
              generation_kwargs={"until": ["\n"], "top_p": 0.0},
              metric_list=mean_of("exact_match"))  # fmt: skip
    with pytest.raises(ConfigError, match=r"'ep_bad_top_p'.*top_p must be in \(0, 1\], got 0.0"):
        load(f"lm_eval:{tmp_path}/ep_bad_top_p.yaml")


def test_without_lm_eval_one_message_names_the_extra(tmp_path: Path) -> None:
    """Where lm_eval is not installed the error names the extra; commands without lm_eval:
    tasks never import it."""
    code = (
        "import sys; sys.path = [p for p in sys.path if 'lm-eval' not in p]\n"
        "from evalpipe.tasks.kindbase import LoadOptions\n"
        "from evalpipe.tasks.kinds import load_refs\n"
        "load_refs(['arithmetic'], LoadOptions())\n"
        "assert 'lm_eval' not in sys.modules\n"
        "try:\n    load_refs(['lm_eval:gsm8k'], LoadOptions())\n"
        f"except {MissingDependencyError.__name__} as e:\n    print(e)\n"
    )
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", "from evalpipe.core.errors import *\n" + code],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "pip install 'evalpipe[lmeval]'" in out


def _run(out: Path, folder: Path, *extra: str, delay: float = 0.0) -> subprocess.Popen:
    env = lm_eval_env() | {"EVALPIPE_FAKE_DELAY_S": str(delay)}
    argv = [sys.executable, "-m", "evalpipe", "run", "--preset", "tiny_random", "--backend",
            "fake", "--window", "2", "--out", str(out), "--tasks",
            ",".join([f"lm_eval:{folder}", *(f"lm_eval:{t}" for t in TASKS)]), *extra]  # fmt: skip
    with (out.parent / f"{out.name}.log").open("a") as log:
        return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)


def _records(out: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: (r["task"], int(r["sample_id"])))


def _evaluate(folder: Path, out: Path, shard: Any = None) -> Path:
    """All the tasks on the fake engine in this process, as `run` does."""
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.fake import FakeEngine
    from evalpipe.run.runner import RunOptions, run_evaluation

    preset = load_preset("tiny_random")
    tasks = load(f"lm_eval:{folder}", *(f"lm_eval:{t}" for t in TASKS), preset=preset,
                 backend="fake")  # fmt: skip
    options = RunOptions(backend="fake", window=2, shard=shard)
    run_evaluation(lambda s: FakeEngine(preset, s), tasks, out, preset=preset, options=options)
    return out


@pytest.fixture(scope="module")
def uninterrupted(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _evaluate(folder, tmp_path_factory.mktemp("lmeval-full") / "run")


def test_merge_aggregates_the_shards_documents_as_one_run(
    folder: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    """`evalpipe merge` writes lm-eval's results of the whole from the shards' documents (lm-eval's
    aggregation again, not an average of the shards' figures): equal to the unsharded run's,
    stderrs and the group's size-weighted mean included."""
    from evalpipe.run.shardmerge import merge_run
    from evalpipe.rundir.shard import Shard

    job = tmp_path / "job"
    for i in range(2):
        _evaluate(folder, job / "shards" / str(i), shard=Shard(index=i, count=2))
    shard = json.loads((job / "shards" / "0" / "lm_eval_results.json").read_text())
    assert shard["n-samples"]["ep_arith"] == {"original": 8, "effective": 4}
    assert merge_run(job).complete
    merged = json.loads((job / "lm_eval_results.json").read_text())
    assert merged == json.loads((uninterrupted / "lm_eval_results.json").read_text())
    assert merged["n-samples"]["ep_arith"] == {"original": 8, "effective": 8}
    assert set(merged["groups"]) == {"ep_group"}


def test_kill_9_mid_run_then_resume_equals_an_uninterrupted_run(
    folder: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    full, killed = uninterrupted, tmp_path / "killed"
    child = _run(killed, folder, delay=0.05)
    samples = killed / "samples.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if samples.exists() and len(samples.read_text().splitlines()) >= 8:
            break
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    partial = len(samples.read_text().splitlines())
    assert 8 <= partial < 30
    assert _run(killed, folder, "--resume").wait(timeout=120) == 0
    assert _records(killed) == _records(full)
    results = json.loads((killed / "lm_eval_results.json").read_text())
    assert results == json.loads((full / "lm_eval_results.json").read_text())
    assert set(results["results"]) == {"ep_arith", "ep_vote", "ep_mc_a", "ep_mc_b",
                                       "ep_cloze", "ep_group"}  # fmt: skip
    assert results["n-samples"]["ep_arith"] == {"original": 8, "effective": 8}
    records = _records(full)
    assert all("<|" not in r["prompt"] for r in records)  # the fake engine: no chat template
    assert {len(r["completions"]) for r in records if r["task"] == "ep_vote"} == {3}  # repeats


def _gsm8k_copy(root: Path) -> Path:
    """A local copy of openai/gsm8k's `main` configuration, shaped as on the hub (parquet)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = root / "openai" / "gsm8k"
    (repo / "main").mkdir(parents=True)
    for split, pairs in (("train", [(1, 1), (2, 5), (3, 3), (4, 1), (6, 2), (7, 7)]),
                         ("test", [(2, 3), (8, 1), (5, 5), (9, 9)])):  # fmt: skip
        rows = [{"question": f"Tom has {a} apples and gets {b} more. How many?",
                 "answer": f"{a}+{b}=<<{a}+{b}={a + b}>>{a + b}\n#### {a + b}"}
                for a, b in pairs]  # fmt: skip
        pq.write_table(
            pa.Table.from_pylist(rows), repo / "main" / f"{split}-00000-of-00001.parquet"
        )
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: "
        "main/train-*\n  - split: test\n    path: main/test-*\n---\n"
    )
    return root


def test_shipped_gsm8k_runs_from_a_local_copy_of_its_hub_dataset(tmp_path: Path) -> None:
    """lm-eval's own gsm8k.yaml (5-shot from train, its two filters) over a local copy of
    openai/gsm8k: `tasks fetch` reads it, `run` evaluates it and writes lm-eval's results."""
    hub = _gsm8k_copy(tmp_path / "hub")
    env = lm_eval_env() | {"HF_DATASETS_CACHE": str(tmp_path / "cache")}
    evalpipe = [sys.executable, "-m", "evalpipe"]
    fetched = subprocess.run([*evalpipe, "tasks", "fetch", "lm_eval:gsm8k"], cwd=hub, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    assert "gsm8k: 4 samples available" in fetched.stdout
    out = tmp_path / "run"
    done = subprocess.run([*evalpipe, "run", "--preset", "tiny_random", "--backend", "fake",
                           "--tasks", "lm_eval:gsm8k", "--out", str(out)], cwd=hub, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "lm_eval_results.json").read_text())
    assert results["n-shot"] == {"gsm8k": 5}
    assert set(results["results"]["gsm8k"]) >= {"exact_match,strict-match",
                                                 "exact_match_stderr,flexible-extract"}  # fmt: skip
    first = json.loads((out / "samples.jsonl").read_text().splitlines()[0])
    assert first["prompt"].count("Question:") == 6  # five shots and the question


@pytest.mark.slurm
def test_a_slurm_job_runs_lm_eval_tasks(local_slurm: Any, folder: Path, tmp_path: Path) -> None:
    """`submit --wait` on the local cluster: the job (inheriting the submitter's environment,
    lm-eval included) runs a task and a group, and writes lm-eval's results."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    done = subprocess.run(
        [sys.executable, "-m", "evalpipe", "submit", "--preset", "tiny_random", "--cluster",
         "local", "--backend", "fake", "--out", "run", "--wait", "--poll", "1", "--tasks",
         f"lm_eval:{folder},lm_eval:ep_arith,lm_eval:ep_group"],
        cwd=tmp_path, env=lm_eval_env() | {"PATH": path}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "run"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["slurm"]["job_id"]
    results = json.loads((run / "lm_eval_results.json").read_text())
    assert set(results["groups"]) == {"ep_group"}
    assert results["n-samples"]["ep_mc_b"]["effective"] == 4
