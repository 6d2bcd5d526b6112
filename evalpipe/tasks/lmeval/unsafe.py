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


def refuse_unsafe(manager: Any, names: Sequence[str]) -> None:
    """ConfigError naming the first of `names` (or of the tasks their groups and tags hold)
    whose task file, an `include:`d file, or a group over it sets `unsafe_code`; read from the
    files' text, with no `!function` resolved."""
    for name, source in _flagged(manager, names):
        raise ConfigError(unsafe_message(name, source))


def refuse_loaded(tasks: Iterable[Any]) -> None:
    """The same refusal for a loaded task lm-eval marks UNSAFE_CODE that no file said so of (a
    Python-defined task's class): nothing of the model's has run yet."""
    for task in tasks:
        if getattr(task, "UNSAFE_CODE", False):
            raise ConfigError(unsafe_message(task.task_name, "its lm-eval task class"))


def unsafe_message(name: str, source: str) -> str:
    return (
        f"lm-eval task {name!r} is marked unsafe_code (in {source}): its metric executes the "
        "programs the model writes. evalpipe runs them only inside its sandbox (no network, "
        "no inherited environment, a private /tmp, resource limits; docs/sandbox.md) and only "
        f"when asked: add {FLAG} (evalpipe.evaluate(..., allow_unsafe_code=True)) to run it. "
        "See docs/lmeval.md."
    )


def _flagged(manager: Any, names: Sequence[str]) -> Iterable[tuple[str, str]]:
    """(name, file) of each task, group or inline config that sets unsafe_code, reached from
    `names` through groups' `task:` lists and tags."""
    from lm_eval.tasks._yaml_loader import load_yaml

    seen: set[str] = set()

    def visit(spec: Any, source: str) -> Iterable[tuple[str, str]]:
        if isinstance(spec, dict):  # an inline task or group, or overrides of a named one
            name = spec.get("group", spec.get("task"))
            if spec.get("unsafe_code"):
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
