"""Where nvidia-long-context-eval is installed (apart from the virtualenv, by scripts/ruler.sh)
and which versions that folder holds. evalpipe never imports it: its generators run as child
processes with the folder on PYTHONPATH (it holds only the packages bench/ruler_requirements.txt
lists, none of which the virtualenv has), and its metrics are read from source."""

from __future__ import annotations

from pathlib import Path

from evalpipe.tasks.apart import ApartInstall

PACKAGE = "long_context_eval"
RULER = ApartInstall(needed_by="RULER tasks need nvidia-long-context-eval",
                     folder="long-context-eval", env="EVALPIPE_RULER_DIR",
                     script="scripts/ruler.sh", marker=f"{PACKAGE}/synthetic.yaml",
                     # bench/ruler_requirements.txt, which scripts/ruler.sh installs
                     pins={"nvidia-long-context-eval": "26.3", "tenacity": "9.2.1",
                           "wonderwords": "3.0.1"})  # fmt: skip


def ruler_dir() -> Path:
    """The folder holding long_context_eval, or MissingDependencyError naming the install
    command."""
    return RULER.path()


def package_path(relative: str) -> Path:
    """A file of the installed long_context_eval package (`data/synthetic/niah.py`)."""
    return ruler_dir() / PACKAGE / relative


def versions() -> dict[str, str]:
    """The folder's version of each pinned distribution, from its dist-info folders ('' when
    one is missing): part of every RULER task's definition, so another version is a new run."""
    return {distribution: RULER.version(distribution) for distribution in RULER.pins}


def off_pin() -> list[str]:
    """One message per version in the folder other than evalpipe's pin."""
    return [
        f"{name} {version or '(missing)'} is installed in {ruler_dir()}, but evalpipe pins "
        f"{RULER.pins[name]}: RULER's samples may differ from the pinned version's. Reinstall "
        f"with: {RULER.install}"
        for name, version in versions().items()
        if version != RULER.pins[name]
    ]
