"""RULER's scoring, read from nvidia-long-context-eval's source at run time: `postprocess_pred`
from eval/evaluate.py (which cannot be imported: it downloads NLTK data and parses the command
line at import) and the per-sample metrics its eval/synthetic/constants.py assigns each
generator (string_match_all, string_match_part). Only those function definitions are compiled,
with the `re` module they use.

RULER's task score is `round(sum(x) / n * 100, 2)` over its samples' values x (hits over
references, or 0/1 for part); its per-sample function returns x * 100, from which x is
recovered exactly (the hits are a whole number), so evalpipe's aggregate adds the same floats
in the same order as RULER's."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evalpipe.core.errors import DatasetError
from evalpipe.tasks.ruler.install import package_path

EVALUATE = "eval/evaluate.py"
CONSTANTS = "eval/synthetic/constants.py"


@dataclass(frozen=True, kw_only=True)
class Metric:
    """A generator's metric: its name (the task-level function) and its per-sample function."""

    name: str
    per_sample: Callable[[list[str], list[list[str]]], list[float]]


def _functions(relative: str, names: set[str]) -> dict[str, Callable]:
    path = package_path(relative)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    namespace: dict = {"re": re}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in names}


@functools.cache
def postprocess() -> Callable[[str | None, dict], str]:
    """evaluate.py's postprocess_pred."""
    return _functions(EVALUATE, {"postprocess_pred"})["postprocess_pred"]


@functools.cache
def metrics() -> dict[str, Metric]:
    """Each generator's metric (niah → string_match_all), as the constants' TASKS assigns."""
    tree = ast.parse(package_path(CONSTANTS).read_text(encoding="utf-8"))
    table = next(
        (n.value for n in tree.body
         if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "TASKS" for t in n.targets)),
        None,
    )  # fmt: skip
    if not isinstance(table, ast.Dict):
        raise DatasetError(f"{package_path(CONSTANTS)} assigns no TASKS table; reinstall it.")
    # {"niah": {"metric_fn": string_match_all, ...}, ...}: the functions by name.
    named: dict[str, dict[str, str]] = {
        ast.literal_eval(key): {  # type: ignore[arg-type]
            ast.literal_eval(k): getattr(v, "id", "")  # type: ignore[arg-type]
            for k, v in zip(entry.keys, entry.values, strict=True)
        }
        for key, entry in zip(table.keys, table.values, strict=True)
        if isinstance(entry, ast.Dict)
    }
    functions = _functions(CONSTANTS, {f["metric_fn_per_sample"] for f in named.values()})
    return {
        script: Metric(name=f["metric_fn"], per_sample=functions[f["metric_fn_per_sample"]])
        for script, f in named.items()
    }


def sample_value(metric: Metric, text: str, outputs: Sequence[str]) -> tuple[str, float]:
    """One answer's prediction (postprocessed as RULER does) and its value x in [0, 1]."""
    pred = postprocess()(text, {})
    percent = metric.per_sample([pred], [list(outputs)])[0]
    # percent is x * 100 with x = hits / references (all) or 0 or 1 (part): both read back as
    # a whole number of references over their count.
    return pred, round(percent * len(outputs) / 100) / len(outputs)


def task_score(values: Sequence[float]) -> float:
    """RULER's task score from its samples' values, in their index order."""
    return round(sum(values) / len(values) * 100, 2)
