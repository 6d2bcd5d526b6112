"""BFCL's web search categories (web_search_base, web_search_no_snippet) end to end without the
internet: BFCL's own WebSearchAPI, unmodified, in the networked sandbox reaches SerpAPI through
a local HTTPS-intercepting proxy (bfcl_web_fakes.py: a CA made here, the user's HTTPS_PROXY and
REQUESTS_CA_BUNDLE) and fetches pages from a local server. A scripted model that searches,
fetches the page and answers from it scores 1.0; a silent one 0; a hostile call is not executed
and is recorded and counted; a run stopped between steps resumes to the uninterrupted run;
the key reaches SerpAPI and no file of the run directory."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from bfcl_scripted import last_role, records, run_model, step_rows
from bfcl_web_fakes import Web

from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import BFCL_CATEGORIES, expand_refs
from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings
from evalpipe.records.sampling import SamplingSettings
from evalpipe.tasks.bfcl import multiturn, steps_program
from evalpipe.tasks.bfcl.install import sandbox_data
from evalpipe.tasks.bfcl.kind import KIND
from evalpipe.tasks.bfcl.multiturn import BfclMultiTurnTask
from evalpipe.tasks.bfcl.websearch import KEY, REFUSED_CALLS, web_search_asked
from evalpipe.tasks.kindbase import LoadOptions

SECRET = "evalpipe-test-serpapi-key-7f3a9c"
CONTEXT = 16_000  # words: the web search function docs and a few results fit
# The entries run, by their index in the package (both categories ask the same questions), and
# the scripted model's part for each question.
ENTRIES = {"web_search_base": (0, 1), "web_search_no_snippet": (0, 2)}
PARTS = {0: "search", 1: "silent", 2: "hostile"}
HOSTILE = ("[fetch_url_content(url=search_engine_query(keywords='hostile')), "
           "fetch_url_content(url=open(file='pwned', mode='w'))]")  # fmt: skip
UNKNOWN = "I do not know"
# BFCL's own executor on the given calls (the web search entry's initial_config), in a plain
# process with the proxy's environment: what BFCL's `eval` of them returns.
BFCL_EXECUTES = """
import json, os, sys, tempfile
given = json.load(sys.stdin)
sys.path[:0] = given["path"]
sys.path.append(given["bfcl"])
os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp()
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call
print(json.dumps([execute_multi_turn_func_call(calls, given["config"], ["WebSearchAPI"], "bfcl",
                                               "web_search_base_0")[0]
                  for calls in given["calls"]]))
"""


class WebModel(FakeEngine):
    """Per entry, its part: "search" searches the question, fetches the result that links to
    the page server, and answers with what the page says (in BFCL's agentic answer format);
    "silent" answers nothing; "hostile" makes HOSTILE's calls, then answers UNKNOWN."""

    def __init__(self, parts: Mapping[str, str], stop_at: str | None = None,
                 stop: Any = None) -> None:  # fmt: skip
        super().__init__(load_preset("tiny_random"), EngineSettings(max_model_len=CONTEXT))
        self.parts = dict(parts)
        self.stop_at, self.stop = stop_at, stop  # set stop.requested once stop_at is asked

    def _completion(self, text: str, settings: SamplingSettings, index: int) -> str:
        if self.stop_at is not None and self.stop_at in text:
            self.stop.requested = "stopped between steps"
        question, part = next((q, p) for q, p in self.parts.items() if f"\nuser: {q}" in text)
        if part == "silent":
            return ""
        if last_role(text) == "user":
            return HOSTILE if part == "hostile" else f"[search_engine_query(keywords={question!r})]"
        result = text.rpartition("\ntool: ")[2]
        if result.startswith("["):  # BFCL's executor hands a list back as its repr
            page = next(r["href"] for r in ast.literal_eval(result) if "127.0.0.1" in r["href"])
            return f"[fetch_url_content(url={page!r}, mode='truncate')]"
        if part == "hostile":
            return str({"answer": UNKNOWN, "context": "the tools failed"})
        answer = json.loads(result)["content"].partition("The answer is\n")[2].strip()
        return str({"answer": answer, "context": "from the page the search found"})


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """The key, and the proxy's settings as a user behind a proxy sets them, in the environment
    of this process (which the runner's steps read)."""
    found = Web(tmp_path_factory.mktemp("web"), {})
    patch = pytest.MonkeyPatch()
    for name, value in {KEY: SECRET, **found.env}.items():
        patch.setenv(name, value)
    yield found
    patch.undo()
    found.close()


@pytest.fixture(scope="module")
def loaded(web: Web) -> list[BfclMultiTurnTask]:
    tasks = KIND.load(expand_refs(["bfcl:web_search_base", "web_search_no_snippet"]),
                      LoadOptions()).tasks  # fmt: skip
    assert [t.name for t in tasks] == ["bfcl_web_search_base", "bfcl_web_search_no_snippet"]
    for entry in tasks[0].entries[:3]:
        web.answer(question(entry), entry["ground_truth"][0])
    return tasks  # type: ignore[return-value]


def small(loaded: Sequence[BfclMultiTurnTask], only: Sequence[int] = (0, 1, 2)
          ) -> list[BfclMultiTurnTask]:  # fmt: skip
    """Each category over its entries of ENTRIES (those of `only`), fresh tasks, as a new
    process loads them."""
    return [dataclasses.replace(t, entries=[t.entries[i] for i in ENTRIES[t.bfcl_category]
                                            if i in only])
            for t in loaded]  # fmt: skip


def question(entry: Mapping[str, Any]) -> str:
    return entry["turns"][0][-1]["content"]


def scripted(loaded: Sequence[BfclMultiTurnTask], **stop: Any) -> WebModel:
    return WebModel({question(loaded[0].entries[i]): p for i, p in PARTS.items()}, **stop)


def by_entry(out: Path) -> dict[str, list[tuple]]:
    found: dict[str, list[tuple]] = {}
    for s in sorted(step_rows(out), key=lambda s: (s["sample_id"], s["index"])):
        found.setdefault(s["sample_id"], []).append((s["index"], s["text"], s["outcome"]))
    return found


@pytest.fixture(scope="module")
def whole(loaded: list[BfclMultiTurnTask], web: Web, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, int]:  # fmt: skip
    out = tmp_path_factory.mktemp("whole")
    before = len(web.searches)
    assert run_model(out, small(loaded), scripted(loaded)) == "complete"
    return out, len(web.searches) - before


def test_searching_fetching_and_answering_scores_one_and_silence_zero(
    whole: tuple[Path, int], web: Web
) -> None:
    out, searches = whole
    found = records(out)
    scores = {k: (r["scores"]["accuracy"], r["scores"][REFUSED_CALLS]) for k, r in found.items()}
    assert scores == {"web_search_base_0": (1.0, 0.0), "web_search_base_1": (0.0, 0.0),
                      "web_search_no_snippet_0": (1.0, 0.0),
                      "web_search_no_snippet_2": (0.0, 2.0)}  # fmt: skip
    assert found["web_search_base_1"]["extracted"] == ["agentic:no_last_message"]
    assert searches == 2  # the two searching entries once each: the hostile call made none
    assert all(s["api_key"] == [SECRET] for s in web.searches)  # the key reached SerpAPI
    # BFCL's show_snippet: the base category's results carry the snippet, no_snippet's not.
    results = {k: v[0][2]["results"][0] for k, v in by_entry(out).items() if "_0" in k}
    base, bare = (ast.literal_eval(results[k]) for k in ("web_search_base_0",
                                                         "web_search_no_snippet_0"))  # fmt: skip
    assert base[1]["body"] == "Where the answer is." and "body" not in bare[1]
    document = json.loads((out / "bfcl_results.json").read_text())
    assert document["categories"]["web_search_base"]["accuracy"] == 0.5
    assert document["categories"]["web_search_no_snippet"][REFUSED_CALLS] == 2.0
    assert document["groups"]["web_search"]["not_run"] == []
    assert "web_search_base" not in document["not_run"]


def test_a_hostile_call_is_not_executed_and_is_recorded(whole: tuple[Path, int], web: Web) -> None:
    (hostile,) = by_entry(whole[0])["web_search_no_snippet_2"][:1]
    outcome = hostile[2]
    assert outcome["refused"] == outcome["calls"] and len(outcome["calls"]) == 2
    assert "search_engine_query(keywords='hostile')" in outcome["calls"][0]
    assert outcome["results"] == [steps_program.REFUSED] * 2
    assert not any(s.get("q") == ["hostile"] for s in web.searches)
    assert steps_program.REFUSED.startswith("Error during execution: ")  # BFCL's failed call


@pytest.mark.parametrize(("call", "runs"), [
    ("search_engine_query(keywords='a', max_results=3, region='wt-wt')", True),
    ("fetch_url_content(url='https://x.org/search_engine_query(1)', mode='raw')", True),
    ("fetch_url_content(url=open(file='f', mode='w'))", False),
    ("fetch_url_content(url='a' + 'b')", False),
    ("fetch_url_content('https://x.org')", False),
    ("fetch_url_content(**{'url': 'https://x.org'})", False),
    ("__import__(name='os')", False),
    ("fetch_url_content(url=f'{1}')", False),
    ("search_engine_query(keywords='a'); exit()", False),
    (["not", "a", "call"], False),
])  # fmt: skip
def test_only_literal_web_search_calls_pass_the_gate(call: Any, runs: bool) -> None:
    assert steps_program.literal_call(call) is runs


@pytest.mark.parametrize(("answer", "ok"), [
    ([{"calls": ["search_engine_query(keywords='a')"], "decode_error": None}], True),
    ([{"calls": [], "decode_error": "bad"}], True),
    ([{"calls": [], "decode_error": None}] * 2, False),  # more items than were sent
    ([{"calls": [["nested"]], "decode_error": None}], False),
    ([{"calls": "search_engine_query(keywords='a')", "decode_error": None}], False),
    (None, False),
])  # fmt: skip
def test_the_decoding_process_answer_is_checked_before_use(answer: Any, ok: bool) -> None:
    """The decoding process ran BFCL's decoders on model text, which may have rewritten its
    answer: one of another shape fails the step (as sandbox_failed) instead of reaching the
    networked process, which gates each call anyway."""
    assert multiturn._decoded(answer, 1) is ok


def test_literal_calls_give_what_bfcls_own_executor_gives(whole: tuple[Path, int]) -> None:
    entry = by_entry(whole[0])["web_search_base_0"]
    calls = [s[2]["calls"] for s in entry if s[2]["calls"]]
    given = sandbox_data(calls=calls, config={"WebSearchAPI": {"show_snippet": True}})
    done = subprocess.run([sys.executable, "-c", BFCL_EXECUTES], input=json.dumps(given),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [s[2]["results"] for s in entry
                                                        if s[2]["calls"]]  # fmt: skip


def test_a_run_stopped_between_steps_resumes_to_the_same_run_and_fetches_nothing_again(
    loaded: list[BfclMultiTurnTask], whole: tuple[Path, int], web: Web, tmp_path: Path
) -> None:
    """The searching entries (each entry's steps are its own: the whole run's are compared)."""
    stop = SimpleNamespace(requested=None)
    before = len(web.searches)
    model = scripted(loaded, stop_at="The answer is", stop=stop)  # once a page was fetched
    assert run_model(tmp_path, small(loaded, only=(0,)), model, stop) == "interrupted"
    assert run_model(tmp_path, small(loaded, only=(0,)), scripted(loaded)) == "complete"
    assert len(web.searches) - before == whole[1]  # no recorded call was made again
    ids = ["web_search_base_0", "web_search_no_snippet_0"]
    assert sorted(records(tmp_path)) == ids
    for sample_id in ids:
        for key in ("turns", "extracted", "scores"):
            assert records(tmp_path)[sample_id][key] == records(whole[0])[sample_id][key]
        assert by_entry(tmp_path)[sample_id] == by_entry(whole[0])[sample_id]


def test_the_key_is_in_no_file_of_the_run_directory(whole: tuple[Path, int], web: Web) -> None:
    files = [p for p in whole[0].rglob("*") if p.is_file()]
    assert files and web.searches
    assert [p for p in files if SECRET.encode() in p.read_bytes()] == []


def test_the_estimate_prices_a_request_per_question(loaded: list[BfclMultiTurnTask]) -> None:
    prompts = loaded[0].request_prompts(3)  # its answers are not calls
    assert [p[-1]["content"] for p in prompts] == [question(e) for e in loaded[0].entries[:3]]


def test_without_the_key_web_search_is_refused_when_named_and_left_out_of_plain_bfcl(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(KEY, raising=False)
    with pytest.raises(ConfigError, match=rf"web_search_no_snippet.*{KEY}.*serpapi\.com"):
        KIND.load(expand_refs(["bfcl:multi_turn_base", "web_search_no_snippet"]), LoadOptions())
    assert web_search_asked(BFCL_CATEGORIES, ["bfcl"]) == []
    monkeypatch.setenv(KEY, SECRET)
    web = ["web_search_base", "web_search_no_snippet"]
    assert web_search_asked(BFCL_CATEGORIES, ["bfcl"]) == web
    (tmp_path / "bfcl_eval" / "data").mkdir(parents=True)  # installed before web search ran
    monkeypatch.setenv("EVALPIPE_BFCL_DIR", str(tmp_path))
    with pytest.raises(MissingDependencyError, match=r"serpapi, bs4, html2text.*bfcl\.sh"):
        web_search_asked(BFCL_CATEGORIES, ["bfcl"])
