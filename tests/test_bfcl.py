"""The bfcl task kind without a model: its references, its refusals, BFCL's own checker on
scripted completions in the sandbox (each checker edge, and an `eval` payload that never reaches
the runner), and a run on the fake engine keeping per-category accuracy."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from evalpipe.catalog.taskrefs import (
    BFCL_CATEGORIES,
    BFCL_WEB_SEARCH,
    TaskRef,
    check_selection,
    expand_refs,
)
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.results import results_document
from evalpipe.tasks.bfcl.sensitivity import format_of
from evalpipe.tasks.bfcl.task import PREFIX, BfclTask
from evalpipe.tasks.bfcl.websearch import KEY
from evalpipe.tasks.kindbase import LoadOptions


def load(*tasks: str) -> dict[str, BfclTask]:
    loaded = KIND.load(expand_refs(tasks), LoadOptions())
    return {task.bfcl_category: task for task in loaded.tasks}  # type: ignore[attr-defined]


def test_a_comma_list_continues_a_bfcl_reference_and_the_bare_name_is_every_category() -> None:
    refs = [ref for ref, _ in expand_refs(["bfcl:simple_python", "multiple", "arithmetic"])]
    assert refs == [TaskRef(kind="bfcl", name="simple_python"),
                    TaskRef(kind="bfcl", name="multiple"),
                    TaskRef(kind="file", name="arithmetic")]  # fmt: skip
    assert [str(r) for r in refs[:2]] == ["bfcl:simple_python", "bfcl:multiple"]
    whole = TaskRef.parse("bfcl")
    assert (whole.kind, str(whole)) == ("bfcl", "bfcl")


def test_an_unknown_category_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="has no 'simple_pyton'") as caught:
        check_selection(None, ["bfcl:simple_pyton"])
    assert all(name in str(caught.value) for name in BFCL_CATEGORIES)


def test_suite_tools_2026_runs_bfcl_and_tau2_and_gives_them_no_settings(tmp_path: Path) -> None:
    assert [ref for ref, _ in expand_refs(["suite:tools-2026"])] == [
        TaskRef(kind="bfcl", name="bfcl"),
        TaskRef(kind="tau2", name="tau2"),
    ]
    suite = tmp_path / "mine.yaml"
    suite.write_text("tasks:\n  - task: bfcl:simple_python\n    max_tokens: 512\n")
    with pytest.raises(ConfigError, match="'bfcl:simple_python', a bfcl task with n or max_tokens"):
        expand_refs([f"suite:{suite}"])
    suite.write_text("tasks:\n  - task: suite:tools-2026\n")
    with pytest.raises(ConfigError, match=r"a suite task; a suite .* lists no other suite"):
        expand_refs([f"suite:{suite}"])


def test_bfcl_eval_missing_is_one_message_naming_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALPIPE_BFCL_DIR", str(tmp_path))
    with pytest.raises(MissingDependencyError, match=r"not installed in .*bash scripts/bfcl\.sh"):
        load("bfcl:simple_python")


@pytest.fixture(scope="module")
def every(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BfclTask]:
    """Plain `bfcl`'s tasks, read once (~12 s), without SERPAPI_API_KEY and with no encoder
    cached for memory_vector, so web search and memory_vector are left out (their own test
    files run them)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(KEY, raising=False)
        patch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("empty-hub")))
        return load("bfcl")


def test_bfcl_selects_every_category_in_the_packages_order(every: dict[str, BfclTask]) -> None:
    tasks = every
    # bfcl-eval's import side effects went to a temporary BFCL_PROJECT_ROOT.
    assert not {"result", "score"} & {p.name for p in bfcl_dir().iterdir()}
    assert all(t.sampling.temperature == 0.001 and t.sampling.max_tokens == 4096
               for t in tasks.values())  # fmt: skip
    # A memory category's prerequisite conversations are a task of their own, just before it.
    assert [c for c in tasks if not c.endswith("_prereq")] == [
        c for c in BFCL_CATEGORIES
        if c not in BFCL_WEB_SEARCH and c != "memory_vector"]  # fmt: skip
    assert list(tasks)[-4:] == ["memory_kv_prereq", "memory_kv", "memory_rec_sum_prereq",
                                "memory_rec_sum"]  # fmt: skip
    simple = tasks["simple_python"].samples(2)
    assert [s.id for s in simple] == ["simple_python_0", "simple_python_1"]
    system, user = simple[0].prompt
    assert system["role"] == "system" and "calculate_triangle_area" in system["content"]
    assert user["role"] == "user"
    assert tasks["irrelevance"].samples(1)[0].target["ground_truth"] is None


def test_tasks_show_prints_the_chat_bfcl_builds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "show", "bfcl:simple_python", "--limit", "1"]) == exitcodes.OK
    shown = json.loads(capsys.readouterr().out.splitlines()[0])
    assert shown["id"] == "simple_python_0"
    assert [m["role"] for m in shown["prompt"]] == ["system", "user"]


# simple_python_0: calculate_triangle_area(base: int, height: int, unit: str = optional).
CORRECT = "[calculate_triangle_area(base=10, height=5)]"  # unit, optional, left out


def test_bfcls_checker_on_each_edge_in_the_sandbox() -> None:
    marker = Path("/tmp") / f"ep-bfcl-marker-{uuid.uuid4().hex}"
    # BFCL's decoder evals a binary operation: this writes a file and evaluates to 10.
    write = f"open('{marker}', 'w').write('0123456789')"
    payload = f"[calculate_triangle_area(base={write} + 0, height=5)]"
    texts = {
        CORRECT: "valid",
        "[calculate_triangle_area(base=10, height=5, unit='units')]": "valid",
        "```\ncalculate_triangle_area(base=10, height=5)\n```": "valid",
        '[calculate_triangle_area(base="10", height=5)]': "type_error:simple",
        "[calculate_triangle_area(base=10)]": "simple_function_checker:missing_required",
        f"[{CORRECT[1:-1]}, calculate_triangle_area(base=1, height=2)]":
            "simple_function_checker:wrong_count",
        "The area is half the base times the height.": "ast_decoder:decoder_failed",
        payload: "valid",
    }  # fmt: skip
    # One call whose evaluation ends the checker's process: its own sample fails, counted.
    killer = "[calculate_triangle_area(base=__import__('os')._exit(3) + 1, height=5)]"
    tasks = load("bfcl:simple_python", "irrelevance")
    first, second = tasks["simple_python"].samples(2)
    scored, killed = tasks["simple_python"].score_many([(first, list(texts)), (second, [killer])])
    assert dict(zip(texts, scored.extracted, strict=True)) == texts
    assert scored.scores == {"accuracy": 4 / 8, "unparsed": 1 / 8, "sandbox_failed": 0.0}
    assert killed.extracted == ("sandbox_failed",)
    assert killed.scores == {"accuracy": 0.0, "unparsed": 0.0, "sandbox_failed": 1.0}
    # The payload ran (its call decoded with base=10), in the sandbox's private /tmp only.
    assert not marker.exists()

    irrelevance = tasks["irrelevance"].samples(1)[0]
    refusal, call, empty = tasks["irrelevance"].score_many(
        [(irrelevance, ["None of the functions can answer this."]),
         (irrelevance, [CORRECT]), (irrelevance, ["[]"])]
    )  # fmt: skip
    assert (refusal.scores["accuracy"], refusal.extracted) == (1.0, ("valid",))
    assert call.extracted == ("irrelevance_error:decoder_success",)
    assert call.scores["accuracy"] == 0.0
    assert empty.scores["accuracy"] == 1.0  # no call: BFCL's relevance rule


def test_a_fake_run_keeps_per_category_accuracy_and_an_overall_marked_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--out", "run",
            "--tasks", "bfcl:simple_python,irrelevance", "--limit", "2"]  # fmt: skip
    assert main(argv) == exitcodes.OK
    document = json.loads(Path("run/bfcl_results.json").read_text())
    assert document["mode"] == "prompting" and 0.0 <= document["overall"] <= 1.0
    assert set(document["categories"]) == {"simple_python", "irrelevance"}
    for found in document["categories"].values():
        assert found["total"] == 2 and 0.0 <= found["accuracy"] <= 1.0
        assert found["ci_low"] <= found["accuracy"] <= found["ci_high"]
    assert "multiple" in document["not_run"] and "irrelevance" not in document["not_run"]
    assert document["overall_complete"] is False and "memory_kv" in document["overall_note"]
    assert document["groups"]["non_live"]["not_run"] == ["simple_java", "simple_javascript",
                                                         "multiple", "parallel",
                                                         "parallel_multiple"]  # fmt: skip


# format_sensitivity's first 26 entries: simple_python_19, math.gcd(num1=40, num2=50), under each
# of BFCL's prompt formats; the answer in each return format it may ask for.
GCD = {
    "python": "[math.gcd(num1=40, num2=50)]",
    "json": '```json\n[{"function":"math.gcd","parameters":{"num1":40,"num2":50}}]\n```',
    "verbose_xml": '<functions><function name="math.gcd"><params><param name="num1" value="40" '
                   'type="integer"/><param name="num2" value="50" type="integer"/></params>'
                   "</function></functions>",
    "concise_xml": '<functions><function name="math.gcd"><param name="num1" type="integer">40'
                   '</param><param name="num2" type="integer">50</param></function></functions>',
}  # fmt: skip


def asked(prompt_format: str) -> str:
    """The correct answer in the return format (and tool-call tag) `prompt_format` asks for."""
    fields = dict(part.split("=") for part in prompt_format.split("&"))
    answer = GCD[fields["ret_fmt"]]
    return f"<TOOLCALL>{answer}</TOOLCALL>" if fields["tool_call_tag"] == "True" else answer


def test_format_sensitivity_prompts_and_decodes_each_format_as_bfcl_does(
    every: dict[str, BfclTask],
) -> None:
    task = every["format_sensitivity"]
    assert len(task.entries) == 26 * 200  # BFCL's formats over its 200 chosen entries
    samples = task.samples(26)
    formats = [format_of(s.id) for s in samples]
    assert len(set(formats)) == 26 and all(s.id.endswith(":simple_python_19") for s in samples)
    system = {f: s.prompt[0]["content"] for f, s in zip(formats, samples, strict=True)}
    tagged = "ret_fmt=json&tool_call_tag=True&func_doc_fmt=xml&prompt_fmt=plaintext&style=classic"
    assert "<TOOLCALL>```json" in system[tagged] and '<function name="math.gcd">' in system[tagged]
    # Each answer decoded in the format its prompt asked for; a plain Python list is read
    # only where Python without the tag was asked for (5 formats).
    scored = task.score_many([(s, [asked(f), GCD["python"]])
                              for s, f in zip(samples, formats, strict=True)])  # fmt: skip
    assert all(found.extracted[0] == "valid" for found in scored)
    plain = [f for f, found in zip(formats, scored, strict=True) if found.extracted[1] == "valid"]
    assert len(plain) == 5 and all("ret_fmt=python&tool_call_tag=False" in f for f in plain)
    # Outside the overall; its spread across the formats as BFCL's score file heads it.
    finished = [(s.id, found.scores) for s, found in zip(samples, scored, strict=True)]
    document = results_document(["format_sensitivity"], {PREFIX + "format_sensitivity": finished},
                                {}, PREFIX)  # fmt: skip
    spread = document["format_sensitivity"]
    assert spread["formats"][tagged] == {"accuracy": 0.5, "correct": 0.5, "total": 1}
    assert (spread["accuracy_max_delta"], spread["accuracy_variance"],
            spread["accuracy_std"]) == (50.0, 403.85, 20.1)  # fmt: skip
    assert document["categories"]["format_sensitivity"]["total"] == 26
    outside = (*document["not_run"], document["overall_note"])
    assert not any("format_sensitivity" in said for said in outside)
