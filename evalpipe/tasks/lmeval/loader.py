"""Find lm-eval tasks by name, task file or folder, indexing only the folders they can be in.

lm-eval's `TaskManager()` scans every one of its ~12,000 task files (about 6.6 s here). A task
of lm-eval's own lives in the folder its name starts with (gsm8k in tasks/gsm8k, arc_easy in
tasks/arc, mmlu in tasks/mmlu), so those folders are indexed first and the full scan is the
fallback for a name none of them holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError, DatasetError, MissingDependencyError
from evalpipe.tasks.lmeval.unsafe import refuse_loaded, refuse_unsafe

VERSION = "0.4.13"  # the release the bridge uses (pinned by the evalpipe[lmeval] extra)


def import_lm_eval() -> Any:
    """The lm_eval package, or one error naming the extra that installs it."""
    try:
        import lm_eval
        import lm_eval.tasks
    except ImportError as exc:
        raise MissingDependencyError(
            f"lm_eval: tasks need EleutherAI lm-eval {VERSION} ({exc}). Install it with "
            "`pip install 'evalpipe[lmeval]'` (see docs/lmeval.md)."
        ) from None
    return lm_eval


def split_specs(specs: Sequence[str]) -> tuple[list[str], list[Path]]:
    """What `lm_eval:` references name after their prefix, as (task names and files, folders to
    search)."""
    wanted: list[str] = []
    folders: list[Path] = []
    for spec in specs:
        path = Path(spec).expanduser()
        if spec.endswith((".yaml", ".yml")) or path.is_dir() or "/" in spec:
            if not path.exists():
                raise ConfigError(f"lm-eval task file or folder {spec!r} does not exist.")
            if path.is_dir():
                folders.append(path.resolve())
                continue
            folders.append(path.resolve().parent)  # its `include:`s and siblings
            wanted.append(str(path.resolve()))
            continue
        wanted.append(spec)
    if not wanted:
        raise ConfigError(
            f"lm-eval folder(s) {', '.join(map(str, folders))} given, but no task: a folder is "
            "searched for the lm_eval:NAME tasks named beside it (as lm-eval's --include_path)."
        )
    return wanted, folders


def load(
    names: Sequence[str], folders: Sequence[Path], *, allow_unsafe_code: bool = False
) -> dict[str, Any]:
    """lm-eval's TaskManager.load result (tasks, groups, group_map) for `names`; a task marked
    unsafe_code is refused before lm-eval imports its modules unless `allow_unsafe_code`."""
    lm_eval = import_lm_eval()
    from lm_eval.tasks import TaskManager

    # A task file is loaded by its name from its folder (searched): lm-eval 0.4.13 takes a
    # group file's `task:` list for its name when given the path.
    names = [_name_in(Path(name)) if Path(name).is_file() else name for name in names]
    shipped = Path(lm_eval.tasks.__file__).parent
    near = sorted({folder for name in names for folder in _candidates(shipped, name)})
    folders = list(dict.fromkeys(folders))
    nearby = TaskManager(include_defaults=False, include_path=[*near, *folders])
    try:
        return _load(nearby, names, allow_unsafe_code)
    except KeyError:  # a name elsewhere, or a group reaching into other folders: scan them all
        pass
    try:
        return _load(TaskManager(include_path=list(folders) or None), names, allow_unsafe_code)
    except KeyError as exc:
        raise ConfigError(
            f"lm-eval {VERSION} has no task, group or tag {exc.args[0]!r}; `lm-eval ls tasks` "
            "lists them, or give a task file as lm_eval:PATH.yaml."
        ) from None


def _name_in(path: Path) -> str:
    """The task or group a task file defines."""
    from lm_eval.tasks._yaml_loader import load_yaml

    config = load_yaml(path, resolve_func=False)
    name = config.get("group") if "group" in config else config.get("task")
    if not isinstance(name, str):
        raise ConfigError(f"lm-eval task file {str(path)!r} names no `task:` or `group:`.")
    return name


def _load(manager: Any, names: Sequence[str], allow_unsafe_code: bool) -> dict[str, Any]:
    for name in names:
        if name not in manager.all_tasks:
            raise KeyError(name)
    if not allow_unsafe_code:
        refuse_unsafe(manager, names)
    try:
        loaded = manager.load(list(names))
    except (ConnectionError, OSError, RuntimeError) as exc:  # the datasets library's failures
        raise DatasetError(
            f"lm-eval could not load the dataset of {', '.join(names)}: {exc}. Fill the "
            "Hugging Face cache first on a machine with network (`evalpipe tasks fetch "
            "lm_eval:NAME`, with HF_DATASETS_CACHE on a folder the compute nodes share; run "
            "them with HF_DATASETS_OFFLINE=1), or copy the task file with dataset_path: json "
            "and dataset_kwargs: {data_files: ...} on local files and run lm_eval:COPY.yaml. "
            "A dataset that needs a loading script cannot be read by datasets 4 or later."
        ) from None
    except ValueError as exc:
        raise ConfigError(f"lm-eval could not load {', '.join(names)}: {exc}") from exc
    if not allow_unsafe_code:
        refuse_loaded(loaded["tasks"].values())
    return loaded


def _candidates(shipped: Path, name: str) -> list[Path]:
    """The lm-eval task folder whose name starts `name` (arc for arc_easy), the longest."""
    found = [
        shipped / folder
        for folder in {name, *(name[:i] for i, c in enumerate(name) if c in "_-")}
        if folder and (shipped / folder).is_dir()
    ]
    return sorted(found, key=lambda p: -len(p.name))[:1]
