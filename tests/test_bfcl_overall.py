"""BFCL's groups and overall in bfcl_results.json equal (==) those bfcl-eval's own leaderboard
code (`generate_leaderboard_csv`, run in a child process) computes from the same per-category
figures, for several combinations of categories run and not run; the document says when the
overall counts categories not run."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from evalpipe.catalog.taskrefs import BFCL_CATEGORIES
from evalpipe.tasks.bfcl import overall
from evalpipe.tasks.bfcl.child import project_env
from evalpipe.tasks.bfcl.install import bfcl_dir
from evalpipe.tasks.bfcl.results import package_entries, results_document

# In a child: BFCL's leaderboard over one model per combination, each table's rows caught where
# the package writes them as CSV (before it rounds them to percentages). The models' registry
# (constants/model_config.py) gives the rows only their names, links and prices, and importing it
# imports every API client (~10 s): a stand-in module gives those.
BFCL_SIDE = r"""
import json, sys, types
given = json.load(sys.stdin)
sys.path.append(given["bfcl"])
names = [f"run{i}" for i in range(len(given["runs"]))]
model = dict(display_name="", url="", org="", license="", input_price=None, output_price=None)
registry = types.ModuleType("bfcl_eval.constants.model_config")
registry.MODEL_CONFIG_MAPPING = {n: types.SimpleNamespace(**model, name=n) for n in names}
sys.modules[registry.__name__] = registry
import bfcl_eval.eval_checker.eval_runner_helper as helper
caught = {}
helper.write_score_csv_file = lambda data, file_path, header, *a, **k: caught.setdefault(
    str(file_path).rsplit("/", 1)[-1], [dict(zip(header, row)) for row in data])
table = {name: {c: {"accuracy": correct / total, "total_count": total}
                for c, (correct, total) in run.items()}
         for name, run in zip(names, given["runs"])}
helper.generate_leaderboard_csv(table, helper.Path("."))
from bfcl_eval.constants import category_mapping as mapping
caught["scoring"], caught["other"] = mapping.ALL_SCORING_CATEGORIES, mapping.NON_SCORING_CATEGORY
print(json.dumps(caught))
"""

# BFCL's columns (constants/column_headers.py) → evalpipe's figures.
COLUMNS = {
    "data_overall.csv": {"Overall Acc": "overall", "Non-Live AST Acc": "non_live",
                         "Non-Live Simple AST": "non_live_simple", "Live Acc": "live",
                         "Irrelevance Detection": "irrelevance_detection",
                         "Relevance Detection": "relevance_detection",
                         "Multi Turn Acc": "multi_turn", "Web Search Acc": "web_search",
                         "Memory Acc": "memory", "Live Parallel AST": "live_parallel",
                         "Multi Turn Base": "multi_turn_base"},
    "data_non_live.csv": {"Non-Live Overall Acc": "non_live", "Java Simple AST": "simple_java"},
    "data_agentic.csv": {"Agentic Overall Acc": "agentic", "Memory KV": "memory_kv"},
}  # fmt: skip
SINGLE_TURN = overall.SCORED[:13]


def combinations() -> list[dict[str, tuple[int, int]]]:
    """Per combination, category → (correct, total): partial runs (--limit), every category,
    a live category missing (the live group weighs it by the package's count), no non-live."""
    draw = random.Random(40)

    def run(names: tuple[str, ...]) -> dict[str, tuple[int, int]]:
        totals = {n: draw.randint(1, 60) for n in names}
        return {n: (draw.randint(0, t), t) for n, t in totals.items()}

    return [
        run(("simple_python", "irrelevance")),
        run(SINGLE_TURN),
        run(overall.SCORED),
        run(tuple(c for c in overall.SCORED if c not in ("live_parallel", "memory_vector"))),
        run((*overall.MULTI_TURN, *overall.LIVE_AST, "web_search_base")),
        {c: (0, 3) for c in ("live_simple", "live_relevance", "simple_java")},
    ]


def scores_of(run: Mapping[str, tuple[int, int]]) -> dict[str, list[tuple[str, dict[str, float]]]]:
    """Finished samples' scores: `correct` of `total` entries right, in a shuffled order."""
    out = {}
    for name, (correct, total) in run.items():
        found = [{"accuracy": float(i < correct), "unparsed": 0.0} for i in range(total)]
        random.Random(name).shuffle(found)
        out["bfcl_" + name] = [(f"{name}_{i}", s) for i, s in enumerate(found)]
    return out


def bfcl_tables(runs: list[dict[str, tuple[int, int]]]) -> dict[str, list[dict[str, Any]]]:
    given = {"bfcl": str(bfcl_dir()), "runs": runs}
    with tempfile.TemporaryDirectory() as root:
        done = subprocess.run(
            [sys.executable, "-c", BFCL_SIDE], input=json.dumps(given), capture_output=True,
            text=True, env=project_env(root), cwd=root, check=True,
        )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


def test_groups_and_overall_equal_bfcls_leaderboard_code_on_the_same_figures() -> None:
    runs = combinations()
    theirs = bfcl_tables(runs)
    for index, run in enumerate(runs):
        document = results_document(list(run), scores_of(run), {"mode": "prompting"}, "bfcl_")
        ours = {g: v["accuracy"] for g, v in document["groups"].items()}
        ours |= {c: v["accuracy"] for c, v in document["categories"].items()}
        ours["overall"] = document["overall"]
        compared = 0
        for table, columns in COLUMNS.items():
            row = theirs[table][index]
            for column, figure in columns.items():
                if row[column] == "N/A":  # BFCL shows no figure: a category in it was not run
                    assert figure not in document["categories"]
                    assert figure in document["not_run"] or document["groups"][figure]["not_run"]
                    continue
                assert ours[figure] == row[column], (index, column)
                compared += 1
        assert compared >= 5
        missing = [c for c in overall.SCORED if c not in run and c != overall.RELEVANCE]
        assert document["overall_complete"] is (not missing)
        assert all(c in document["overall_note"] for c in missing)
    # The package's category names: the ones its overall counts, and the ones evalpipe accepts.
    assert sorted(overall.SCORED) == sorted(theirs["scoring"])
    assert set(BFCL_CATEGORIES) <= {*theirs["scoring"], *theirs["other"]}


def test_the_live_group_of_all_four_categories_has_an_interval_over_their_entries() -> None:
    run = {c: (5, 10) for c in overall.LIVE_AST} | {"simple_python": (1, 2)}
    groups = results_document(list(run), scores_of(run), {}, "bfcl_")["groups"]
    assert groups["live"]["accuracy"] == 0.5 and groups["live"]["ci_method"] == "wilson"
    assert groups["live"]["ci_low"] < 0.5 < groups["live"]["ci_high"]
    assert "ci_low" not in groups["non_live"]  # a mean of category means, not of entries
    partial = results_document(["live_simple"], scores_of({"live_simple": (5, 10)}), {}, "bfcl_")
    assert "ci_low" not in partial["groups"]["live"]
    assert partial["groups"]["live"]["not_run"] == list(overall.LIVE_AST[1:])


def test_a_category_not_run_counts_as_bfcl_counts_it_the_packages_entries() -> None:
    document = results_document(["simple_python"], scores_of({"simple_python": (1, 1)}), {},
                                "bfcl_")  # fmt: skip
    assert document["categories"].keys() == {"simple_python"}
    assert document["overall_complete"] is False
    assert document["not_run"] == [c for c in overall.SCORED if c != "simple_python"]
    entries = package_entries()
    assert document["groups"]["live"]["count"] == sum(entries[c] for c in overall.LIVE_AST)
    assert document["groups"]["live"]["accuracy"] == 0.0
