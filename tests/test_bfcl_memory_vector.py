"""BFCL's memory_vector as memory_kv runs (tests/test_bfcl_memory.py), its encoder a tiny random
stand-in cached in a Hugging Face hub cache under the home directory, which the sandbox hides
from its programs unless shown (bfcl_vector_encoder.py): a scripted model that stores the
answers in the prerequisite's archival memory and answers the questions from what retrieval
gives it scores 1.0 (the snapshot reached the questions' step processes, which embedded it with
the encoder loaded offline there); one that answers nothing scores 0; a run stopped between the
prerequisite and its questions resumes to the uninterrupted run; BFCL's own loop builds the same
chats, trajectories and snapshots. Without the cached encoder or the packages, naming
memory_vector is refused in one message naming each fix, and plain `bfcl` leaves it out.

Every step process that executes memory_vector's calls imports sentence-transformers and loads
the encoder (5-6 s on a loaded 2-core machine), as does the child that reads the entries: the
short chain (one prerequisite, one question) runs in `make test`; the silent model, the resume
and the comparison with BFCL's own loop, each another chain, are marked `bench`
(`pytest -m bench tests/test_bfcl_memory_vector.py`)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from bfcl_memory_scripted import MemoryModel, SilentModel, agrees_with_bfcls_loop, chain
from bfcl_scripted import records, run_model, step_keys
from bfcl_vector_encoder import REPO, write_encoder

from evalpipe.catalog.taskrefs import expand_refs
from evalpipe.core.errors import MissingDependencyError
from evalpipe.rundir.layout import RunDir
from evalpipe.tasks.bfcl.kind import KIND, check_vector
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.bfcl.vector import find_encoder, missing
from evalpipe.tasks.kindbase import LoadOptions

SCENARIO = "notetaker"  # its conversations are BFCL's shortest (4-5 turns)
PREREQS, QUESTIONS = 1, 1


@pytest.fixture(scope="module")
def hub() -> Iterator[Path]:
    """A hub cache holding the stand-in encoder, under the home directory (where users' caches
    are, and which the sandbox hides), named by HF_HUB_CACHE for the module's tests."""
    home = Path.home() / ".cache"
    home.mkdir(exist_ok=True)
    found = Path(tempfile.mkdtemp(prefix="evalpipe-test-hub-", dir=home))
    write_encoder(found)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(found))
        yield found
    shutil.rmtree(found)


@pytest.fixture(scope="module")
def loaded(hub: Path) -> list[BfclMultiTurnTask]:
    tasks = KIND.load(expand_refs(["bfcl:memory_vector"]), LoadOptions()).tasks
    assert [t.name for t in tasks] == ["bfcl_memory_vector_prereq", "bfcl_memory_vector"]
    # The encoder each task ran with is recorded: another one retrieves other memories.
    (snapshot,) = hub.glob("models--*/snapshots/*")
    assert {t.definition()["encoder"] for t in tasks} == {f"{REPO}@{snapshot.name}"}
    return [t for t in tasks if isinstance(t, BfclMultiTurnTask)]


def small(loaded: list[BfclMultiTurnTask]) -> list[BfclMultiTurnTask]:
    return chain(loaded, SCENARIO, PREREQS, QUESTIONS)


def scripted(tasks: list[BfclMultiTurnTask], **stop: Any) -> MemoryModel:
    prereqs, questions = tasks
    return MemoryModel(questions.entries, [prereqs.entries[0]["turns"][0][-1]["content"]], **stop)


@pytest.fixture(scope="module")
def whole(loaded: list[BfclMultiTurnTask], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("whole")
    tasks = small(loaded)
    assert run_model(out, tasks, scripted(tasks)) == "complete"
    return out


def test_answers_retrieved_from_the_prerequisites_vector_memory_score_one(whole: Path) -> None:
    found = records(whole)
    questions = [r for k, r in found.items() if "_prereq_" not in k]
    assert len(questions) == QUESTIONS
    assert all((r["extracted"], r["scores"]["accuracy"]) == (["valid"], 1.0) for r in questions)
    assert [r["scores"] for k, r in found.items() if "_prereq_" in k] == [{"left_memory": 1.0}]
    # The prerequisite flushed BFCL's vector store, the answers in its archival memory; each
    # question retrieved them by similarity (the encoder embedded the query in its process).
    rows = [json.loads(x) for x in RunDir(whole).steps.read_text().splitlines()]
    (flushed,) = [r["outcome"]["memory"] for r in rows if r["outcome"].get("memory")]
    (stored,) = flushed["snapshot"]["archival_memory"]["store"].values()
    assert stored.startswith("answer_0=")
    retrieved = [r["outcome"]["results"] for r in rows if r["sample_id"].startswith(
        "memory_vector_1") and r["outcome"].get("calls")]  # fmt: skip
    assert len(retrieved) == QUESTIONS and all("similarity_score" in r[0] for r in retrieved)
    document = json.loads((whole / "bfcl_results.json").read_text())
    assert document["categories"]["memory_vector"]["accuracy"] == 1.0
    assert document["groups"]["memory"]["not_run"] == ["memory_kv", "memory_rec_sum"]
    assert "memory_vector" not in document["not_run"]


@pytest.mark.bench  # SLOW: see the module's text
def test_a_model_that_answers_nothing_scores_zero(
    loaded: list[BfclMultiTurnTask], tmp_path: Path
) -> None:
    assert run_model(tmp_path, small(loaded), SilentModel()) == "complete"
    questions = [r for k, r in records(tmp_path).items() if "_prereq_" not in k]
    assert len(questions) == QUESTIONS and all(r["scores"]["accuracy"] == 0 for r in questions)


@pytest.mark.bench  # SLOW: see the module's text
def test_a_run_stopped_between_the_prerequisite_and_its_questions_resumes_to_the_same_run(
    loaded: list[BfclMultiTurnTask], whole: Path, tmp_path: Path
) -> None:
    tasks = small(loaded)
    first_question = tasks[1].entries[0]["turns"][0][-1]["content"]
    stop = SimpleNamespace(requested=None)
    assert run_model(tmp_path, tasks, scripted(tasks, stop_at=first_question, stop=stop), stop) == (
        "interrupted"
    )
    before = records(tmp_path)
    assert "memory_vector_prereq_32-notetaker-0" in before
    assert not any(k.startswith("memory_vector_1") for k in before)
    resumed = small(loaded)  # a new process's tasks: the chain from the run directory alone
    assert run_model(tmp_path, resumed, scripted(resumed)) == "complete"
    for sample_id, record in records(whole).items():
        for key in ("turns", "extracted", "scores", "refusal"):
            assert records(tmp_path)[sample_id].get(key) == record.get(key), (sample_id, key)
    assert step_keys(tmp_path) == step_keys(whole)


@pytest.mark.bench  # SLOW: see the module's text
def test_each_request_result_and_snapshot_equal_bfcls_own_loop(
    loaded: list[BfclMultiTurnTask], whole: Path
) -> None:
    agrees_with_bfcls_loop(small(loaded), whole)


def test_without_the_cached_encoder_or_the_packages_memory_vector_is_refused_in_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(MissingDependencyError) as caught:
        KIND.load(expand_refs(["bfcl:memory_vector"]), LoadOptions())
    said = str(caught.value)
    assert "hf download sentence-transformers/all-MiniLM-L6-v2" in said
    assert str(tmp_path / "empty") in said and "scripts/bfcl.sh" not in said
    # A bfcl-eval folder installed before memory_vector ran: the packages too, in one message.
    folder = tmp_path / "bfcl"
    (folder / "bfcl_eval" / "data").mkdir(parents=True)
    monkeypatch.setenv("EVALPIPE_BFCL_DIR", str(folder))
    with pytest.raises(MissingDependencyError) as caught:
        KIND.load(expand_refs(["bfcl:memory_vector"]), LoadOptions())
    said = str(caught.value)
    assert "hf download" in said and "leave memory_vector out" in said
    assert "sentence-transformers and faiss-cpu packages" in said and "bash scripts/bfcl.sh" in said
    # Plain `bfcl` leaves it out rather than refusing (its results name it as not run).
    assert check_vector(["memory_kv", "memory_vector"], ["bfcl"], missing()) == ["memory_kv"]
    assert check_vector(["memory_vector"], ["bfcl"], []) == ["memory_vector"]


def test_packages_alone_or_a_cache_under_tmp_are_refused_naming_the_fix(
    hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert find_encoder() is not None and missing() == []  # the module's cache: nothing lacks
    folder = tmp_path / "bfcl"
    (folder / "bfcl_eval" / "data").mkdir(parents=True)
    monkeypatch.setenv("EVALPIPE_BFCL_DIR", str(folder))
    (need,) = missing()
    assert "sentence-transformers and faiss-cpu" in need and "bash scripts/bfcl.sh" in need
    monkeypatch.delenv("EVALPIPE_BFCL_DIR")
    # Each sandboxed program has its own /tmp: a cache there cannot be shown to it.
    with tempfile.TemporaryDirectory(dir="/tmp") as inside:
        write_encoder(Path(inside))
        monkeypatch.setenv("HF_HUB_CACHE", inside)
        (need,) = missing()
    assert "outside /tmp" in need and "HF_HUB_CACHE" in need
