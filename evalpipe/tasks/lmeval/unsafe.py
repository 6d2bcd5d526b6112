"""Which lm-eval tasks execute the programs the model writes (`unsafe_code: true`), found in
their task files before lm-eval imports anything of theirs: a task's `!function` modules run
code as they are imported, and lm-eval imports them as it builds the task.

Without --allow-unsafe-code such tasks are refused; with it their scoring runs in evalpipe's
sandbox (evalpipe/tasks/lmeval/sandboxed.py), never in the runner's process.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from evalpipe.core.errors import ConfigError

FLAG = "--allow-unsafe-code"
# Metrics that execute the predictions they score, whatever the task file's unsafe_code says
# (Hugging Face evaluate's, which lm-eval loads for `hf_evaluate: true` or an unknown name).
CODE_METRICS = frozenset({"code_eval"})


def refuse_unsafe(manager: Any, names: Sequence[str]) -> None:
    """ConfigError naming the first of `names` (or of the tasks their groups and tags hold)
    whose task file, an `include:`d file, or a group over it sets `unsafe_code` or scores
    with a metric that executes code; read from the files' text, no `!function` resolved."""
    for name, source in _flagged(manager, names):
        raise ConfigError(unsafe_message(name, source))


def refuse_loaded(tasks: Iterable[Any]) -> None:
    """The same refusal for a loaded task that no file said so of (a Python-defined task's
    class sets UNSAFE_CODE): nothing of the model's has run yet."""
    for task in tasks:
        if runs_model_code(task):
            raise ConfigError(unsafe_message(task.task_name, "its lm-eval task class"))


def runs_model_code(task: Any) -> bool:
    """Whether a loaded lm-eval task executes the model's code as it scores."""
    return bool(getattr(task, "UNSAFE_CODE", False)) or _code_metric(task.config.metric_list)


def _code_metric(metric_list: Any) -> bool:
    metrics = metric_list if isinstance(metric_list, list) else []
    names = [m.get("metric") for m in metrics if isinstance(m, dict)]
    return any(isinstance(name, str) and name in CODE_METRICS for name in names)


def unsafe_message(name: str, source: str) -> str:
    return (
        f"lm-eval task {name!r} is marked unsafe_code or scores with code_eval (in {source}): "
        "its metric executes the programs the model writes. evalpipe runs them only inside "
        "its sandbox (no network, no inherited environment, a private /tmp, resource limits; "
        f"docs/sandbox.md) and only when asked: add {FLAG} (evalpipe.evaluate(..., "
        "allow_unsafe_code=True)) to run it. See docs/lmeval.md."
    )


def _flagged(manager: Any, names: Sequence[str]) -> Iterable[tuple[str, str]]:
    """(name, file) of each task, group or inline config that sets unsafe_code, reached from
    `names` through groups' `task:` lists and tags."""
    from lm_eval.tasks._yaml_loader import load_yaml

    seen: set[str] = set()

    def visit(spec: Any, source: str) -> Iterable[tuple[str, str]]:
        if isinstance(spec, dict):  # an inline task or group, or overrides of a named one
            name = spec.get("group", spec.get("task"))
            if spec.get("unsafe_code") or _code_metric(spec.get("metric_list")):
                yield str(name), source
            members = spec.get("task")
            for member in members if isinstance(members, list) else [members]:
                yield from visit(member, source)
            return
        if not isinstance(spec, str) or spec in seen:
            return
        seen.add(spec)
        entry = manager.task_index.get(spec)
        if entry is None:
            return
        for member in sorted(entry.tags) if entry.kind.name == "TAG" else ():
            yield from visit(member, source)
        if entry.yaml_path is not None:
            # With its `include:`s merged, as lm-eval builds it (the index may hold it without).
            yield from visit(load_yaml(entry.yaml_path, resolve_func=False), str(entry.yaml_path))
        elif entry.cfg is not None:
            yield from visit(entry.cfg, source)

    for name in names:
        yield from visit(name, "the task's file")
