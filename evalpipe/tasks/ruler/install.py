"""Where nvidia-long-context-eval is installed (apart from the virtualenv, by scripts/ruler.sh)
and which versions that folder holds. evalpipe never imports it: its generators run as child
processes with the folder on PYTHONPATH (it holds only the packages bench/ruler_requirements.txt
lists, none of which the virtualenv has), and its metrics are read from source."""

from __future__ import annotations

import os
from pathlib import Path

from evalpipe.core.errors import MissingDependencyError
from evalpipe.tasks.packages import APART_PINS

# Where scripts/ruler.sh installs it, beside the checkout; EVALPIPE_RULER_DIR names another.
DEFAULT_DIR = Path(__file__).resolve().parents[3] / ".cache" / "long-context-eval"
ENV = "EVALPIPE_RULER_DIR"
INSTALL = "bash scripts/ruler.sh (make setup runs it)"
PACKAGE = "long_context_eval"


def ruler_dir() -> Path:
    """The folder holding long_context_eval, or MissingDependencyError naming the install
    command."""
    folder = Path(os.environ.get(ENV) or DEFAULT_DIR)
    if not (folder / PACKAGE / "synthetic.yaml").is_file():
        raise MissingDependencyError(
            f"RULER tasks need nvidia-long-context-eval, which is not installed in {folder} "
            f"({ENV} names another folder). Install it with: {INSTALL}"
        )
    return folder.resolve()


def package_path(relative: str) -> Path:
    """A file of the installed long_context_eval package (`data/synthetic/niah.py`)."""
    return ruler_dir() / PACKAGE / relative


def versions() -> dict[str, str]:
    """The folder's version of each pinned distribution, from its dist-info folders ('' when
    one is missing): part of every RULER task's definition, so another version is a new run."""
    folder = ruler_dir()
    found = {}
    for distribution in APART_PINS:
        stem = distribution.replace("-", "_")
        infos = sorted(folder.glob(f"{stem}-*.dist-info"))
        found[distribution] = (
            infos[-1].name.removeprefix(f"{stem}-").removesuffix(".dist-info") if infos else ""
        )
    return found


def off_pin() -> list[str]:
    """One message per version in the folder other than evalpipe's pin."""
    return [
        f"{name} {version or '(missing)'} is installed in {ruler_dir()}, but evalpipe pins "
        f"{APART_PINS[name]}: RULER's samples may differ from the pinned version's. Reinstall "
        f"with: {INSTALL}"
        for name, version in versions().items()
        if version != APART_PINS[name]
    ]
