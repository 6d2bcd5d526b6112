"""`evalpipe tasks`: list the evaluation tasks, show their prompts, fetch their datasets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evalpipe.tasks import ConfiguredTask
    from evalpipe.tasks.base import Task
    from evalpipe.tasks.kindbase import LoadOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    listing = actions.add_parser(
        "list", help="list the task files, the suites, then every kind of task (the default action)"
    )
    listing.add_argument("--json", action="store_true", help="print a JSON list")
    show = actions.add_parser("show", help="print a task's samples as JSON lines")
    show.add_argument("task", help="a task reference of any kind (`evalpipe tasks list`)")
    show.add_argument("--limit", type=int, default=3, help="how many samples (default 3)")
    fetch = actions.add_parser(
        "fetch",
        help="load every split the tasks read, filling the Hugging Face cache "
        "(run on a machine with network; set HF_DATASETS_CACHE to a shared folder)",
    )
    fetch.add_argument("tasks", nargs="+", help="task references of any kind")
    for action in (show, fetch):
        action.add_argument("--judge-data", type=Path, help="a judged benchmark's data folder")
        action.add_argument(
            "--allow-unsafe-code",
            action="store_true",
            help="load lm-eval tasks marked unsafe_code, as `run --allow-unsafe-code` does "
            "(their modules are imported; nothing here runs the model's code)",
        )
    parser.set_defaults(json=False)


def run(args: argparse.Namespace) -> int:
    from evalpipe import tasks
    from evalpipe.tasks.kindbase import LoadOptions

    if args.action == "show":
        task = _one(args.task, LoadOptions(judge_data=args.judge_data,
                                           allow_unsafe_code=args.allow_unsafe_code))  # fmt: skip
        for sample in task.samples(limit=args.limit):
            row = {"id": sample.id, "prompt": sample.prompt, "target": sample.target}
            if sample.turns:  # a conversation: the user's later turns
                row["turns"] = list(sample.turns)
            if sample.options:  # ranked by log-probability: what is scored after the prompt
                row["options"] = [o.continuation for o in sample.options]
            print(json.dumps({**row, "meta": sample.meta}, ensure_ascii=False))
        return 0
    if args.action == "fetch":
        from evalpipe.tasks.kinds import load_refs

        # Loading every sample fills the cache (lm-eval's tasks as lm-eval builds them).
        given = LoadOptions(judge_data=args.judge_data, allow_unsafe_code=args.allow_unsafe_code)
        loaded, _ = load_refs(args.tasks, given)
        for task in loaded.tasks:
            print(f"{task.name}: {len(task.samples())} samples available")
        return 0
    rows = [_describe(tasks.load_task(name)) for name in tasks.task_names()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from evalpipe.core.textable import format_table

    header = ("task", "category", "default", "source", "scoring", "metrics")
    table = [
        (
            r["name"],
            r["category"],
            "yes" if r["default"] else "",
            r["source"],
            r["scoring"],
            r["metrics"],
        )
        for r in rows
    ]
    print(format_table(header, table))
    suites = _suites()
    if suites:
        print("\nSuites (--tasks suite:NAME):\n")
        print(format_table(("suite", "tasks", "description"), suites))
    from evalpipe.tasks.kinds import listing

    kinds = [(row.reference, row.kind, row.needs or "-", row.about) for row in listing()]
    print("\nTask kinds (--tasks REFERENCE; `evalpipe tasks show REFERENCE`):\n")
    print(format_table(("reference", "kind", "needs", "what"), kinds))
    return 0


def _suites() -> list[tuple[str, str, str]]:
    from evalpipe.catalog.suites import load_suite, suite_names

    rows = []
    for name in suite_names():
        suite = load_suite(name)
        rows.append((name, ",".join(e.task for e in suite.tasks), suite.description))
    return rows


def _one(reference: str, given: LoadOptions) -> Task:
    """The first task `reference` names: a group, suite or benchmark may stand for several."""
    from evalpipe.tasks.kinds import load_refs

    loaded, _ = load_refs([reference], given)
    return loaded.tasks[0]


def _describe(task: ConfiguredTask) -> dict[str, object]:
    from evalpipe.tasks.scorerkinds import scorer_kind

    config = task.config
    return {
        "name": config.name,
        "category": config.category,
        "default": config.default,
        "source": config.source.uri,
        "scoring": scorer_kind(config.scorer).describe(config.scorer),
        "metrics": ",".join(task.metrics),
        "description": config.description,
    }
