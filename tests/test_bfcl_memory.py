"""BFCL's memory categories (memory_kv, memory_rec_sum) as episodes after their prerequisite
conversations, without a model: a scripted model that stores the expected answers in the
prerequisites and answers the questions from the memory alone scores 1.0 (so the memory the
prerequisites left reached the questions: the snapshot for memory_kv's tool, the prompt for
memory_rec_sum's); one that answers nothing scores 0; a run stopped between prerequisites
resumes to the same steps and scores; BFCL's overall counts the categories run; questions
whose prerequisites the run does not hold are refused rather than left waiting, and a pilot or
a shard, which would split them from their prerequisites, is refused before the run starts."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from bfcl_memory_scripted import MemoryModel, SilentModel, agrees_with_bfcls_loop, chain
from bfcl_scripted import records, run_model, step_keys

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.records.episode import Ended
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.shard import Shard
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.memory import MemoryChain
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.kindbase import LoadOptions

SCENARIO = "notetaker"  # its conversations are BFCL's shortest (4-5 turns)
PREREQS, QUESTIONS = 2, 3


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[BfclMultiTurnTask]]:
    tasks = KIND.load(expand_refs(["bfcl:memory_kv", "memory_rec_sum"]), LoadOptions()).tasks
    by: dict[str, list[BfclMultiTurnTask]] = {}
    for task in tasks:
        assert isinstance(task, BfclMultiTurnTask)
        by.setdefault(task.bfcl_category.removesuffix("_prereq"), []).append(task)
    return by


def small(loaded: dict[str, list[BfclMultiTurnTask]]) -> list[BfclMultiTurnTask]:
    """Both categories over the scenario's first conversations and questions, fresh chains."""
    return [t for c in ("memory_kv", "memory_rec_sum")
            for t in chain(loaded[c], SCENARIO, PREREQS, QUESTIONS)]  # fmt: skip


def scripted(tasks: list[BfclMultiTurnTask], **stop: Any) -> MemoryModel:
    questions = [e for t in tasks if not t.bfcl_category.endswith("_prereq") for e in t.entries]
    first = [t.entries[0]["turns"][0][-1]["content"] for t in tasks
             if t.bfcl_category.endswith("_prereq")]  # fmt: skip
    return MemoryModel(questions, first, **stop)


@pytest.fixture(scope="module")
def whole(loaded: dict[str, list[BfclMultiTurnTask]], tmp_path_factory: pytest.TempPathFactory
          ) -> Path:  # fmt: skip
    out = tmp_path_factory.mktemp("whole")
    tasks = small(loaded)
    assert run_model(out, tasks, scripted(tasks)) == "complete"
    return out


def test_answers_from_the_prerequisites_memory_score_one_and_bfcls_overall_counts_them(
    whole: Path,
) -> None:
    found = records(whole)
    questions = {k: r for k, r in found.items() if "_prereq_" not in k}
    assert len(questions) == 2 * QUESTIONS
    for record in questions.values():
        assert (record["extracted"], record["scores"]["accuracy"]) == (["valid"], 1.0)
    prereqs = [r for k, r in found.items() if "_prereq_" in k]
    assert len(prereqs) == 2 * PREREQS
    assert all(r["scores"] == {"left_memory": 1.0} for r in prereqs)
    # Each question started after its prerequisites ended: its first step comes after their last.
    order = [json.loads(x)["sample_id"] for x in RunDir(whole).steps.read_text().splitlines()]
    for category in ("memory_kv", "memory_rec_sum"):
        last = max(i for i, s in enumerate(order) if s.startswith(category + "_prereq_"))
        first = min(i for i, s in enumerate(order) if s.startswith(category + "_1"))
        assert last < first
    # The snapshot the first conversation flushed was the second's start and is recorded.
    kv = [json.loads(x) for x in RunDir(whole).steps.read_text().splitlines()
          if json.loads(x)["outcome"].get("memory")]  # fmt: skip
    assert {s["sample_id"].split("-")[0] for s in kv} == {
        "memory_kv_prereq_32", "memory_kv_prereq_33",
        "memory_rec_sum_prereq_32", "memory_rec_sum_prereq_33"}  # fmt: skip
    document = json.loads((whole / "bfcl_results.json").read_text())
    assert set(document["categories"]) == {"memory_kv", "memory_rec_sum"}
    assert document["categories"]["memory_kv"]["accuracy"] == 1.0
    memory = document["groups"]["memory"]
    assert memory["not_run"] == ["memory_vector"] and memory["accuracy"] == pytest.approx(2 / 3)
    assert "memory_kv" not in document["not_run"] and "memory_rec_sum" not in document["not_run"]
    assert "memory_kv" not in document["overall_note"]
    assert document["overall"] == pytest.approx(0.4 * (2 / 3) / 2)  # agentic: memory, web 0


def test_a_model_that_answers_nothing_scores_zero(
    loaded: dict[str, list[BfclMultiTurnTask]], tmp_path: Path
) -> None:
    tasks = chain(loaded["memory_kv"], SCENARIO, 1, 2)
    assert run_model(tmp_path, tasks, SilentModel()) == "complete"
    questions = [r for k, r in records(tmp_path).items() if "_prereq_" not in k]
    assert len(questions) == 2 and all(r["scores"]["accuracy"] == 0.0 for r in questions)
    document = json.loads((tmp_path / "bfcl_results.json").read_text())
    assert document["groups"]["memory"]["accuracy"] == 0.0


def test_a_run_stopped_between_prerequisites_resumes_to_the_same_run(
    loaded: dict[str, list[BfclMultiTurnTask]], whole: Path, tmp_path: Path
) -> None:
    tasks = small(loaded)
    second = tasks[0].entries[1]["turns"][0][-1]["content"]  # memory_kv's second conversation
    stop = SimpleNamespace(requested=None)
    model = scripted(tasks, stop_at=second, stop=stop)
    assert run_model(tmp_path, tasks, model, stop) == "interrupted"
    before = records(tmp_path)
    assert "memory_kv_prereq_32-notetaker-0" in before
    assert not any(k.startswith("memory_kv_1") for k in before)  # the questions waited
    resumed = small(loaded)  # a new process's tasks: the chain from the run directory alone
    assert run_model(tmp_path, resumed, scripted(resumed)) == "complete"
    assert records(tmp_path).keys() == records(whole).keys()
    for sample_id, record in records(whole).items():
        for key in ("turns", "extracted", "scores", "refusal"):
            assert records(tmp_path)[sample_id].get(key) == record.get(key), (sample_id, key)
    assert step_keys(tmp_path) == step_keys(whole)


def test_questions_without_their_prerequisites_are_refused_not_left_waiting(
    loaded: dict[str, list[BfclMultiTurnTask]], tmp_path: Path
) -> None:
    questions = chain(loaded["memory_kv"], SCENARIO, 1, 1)[1]
    with pytest.raises(ConfigError, match="memory_kv_prereq_32-notetaker-0"):
        run_model(tmp_path, [questions], SilentModel())


@pytest.mark.parametrize(
    "split", [{"pilot": "2"}, {"shard": Shard(index=0, count=2)}], ids=["pilot", "shard"]
)
def test_a_memory_category_under_a_pilot_or_a_shard_is_refused_before_anything_runs(
    loaded: dict[str, list[BfclMultiTurnTask]], tmp_path: Path, split: dict[str, Any]
) -> None:
    out = tmp_path / "run"
    refused = r"bfcl_memory_kv_prereq.* cannot run under --(pilot|shard 0/2).*Run it whole"
    with pytest.raises(ConfigError, match=refused):
        run_evaluation(lambda settings: SilentModel(), chain(loaded["memory_kv"], SCENARIO, 1, 1),
                       out, preset=load_preset("tiny_random"),
                       options=RunOptions(backend="fake", **split))  # fmt: skip
    assert not out.exists()


def test_limits_estimates_refusals_and_a_conversation_that_flushed_nothing(
    loaded: dict[str, list[BfclMultiTurnTask]],
) -> None:
    prereqs, questions = loaded["memory_kv"]
    # --limit: the first questions (customer's), and the conversations they wait for.
    asked = questions.samples(2)
    assert [s.id for s in prereqs.samples(2)] == questions.entries[0]["depends_on"]
    # The estimate: a request per turn (a question's ground truth is answers, not calls).
    turns = sum(len(e["turns"]) for e in prereqs.entries if e["id"] in
                questions.entries[0]["depends_on"])  # fmt: skip
    assert len(prereqs.request_prompts(2)) == turns and len(questions.request_prompts(2)) == 2
    # A question whose step was refused fails as BFCL's failed agentic inference.
    (refused,) = questions.score_episodes([(asked[0], [], Ended(reason="context_overflow"))])
    assert refused.extracted == ("agentic:inference_error",) and refused.scores["accuracy"] == 0
    # The memory after a conversation that flushed nothing is the one before it left.
    chain = MemoryChain()
    chain.end("a", {"snapshot": {"memory": "x"}, "content": "x"})
    chain.end("b", None)
    assert chain.waiting(["a", "b", "c"]) == ("c",)
    assert chain.latest(["a", "b"]) == {"snapshot": {"memory": "x"}, "content": "x"}
    assert chain.latest(["b"]) is None


def test_a_bfcl_folder_without_rank_bm25_is_refused_naming_the_reinstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bfcl_eval" / "data").mkdir(parents=True)  # installed before memory_kv ran
    monkeypatch.setenv("EVALPIPE_BFCL_DIR", str(tmp_path))
    with pytest.raises(MissingDependencyError, match=r"rank-bm25.*bash scripts/bfcl\.sh"):
        KIND.load(expand_refs(["bfcl:memory_kv"]), LoadOptions())


def test_each_request_result_and_snapshot_equal_bfcls_own_loop(
    loaded: dict[str, list[BfclMultiTurnTask]], whole: Path
) -> None:
    """The whole run's recorded answers given to BFCL's own loop, entry by entry in BFCL's
    order: every chat evalpipe sent (next_request from the record, the chain restored from
    the run directory as a resume restores it), every trajectory and every flushed snapshot
    equal BFCL's."""
    agrees_with_bfcls_loop(small(loaded), whole)
