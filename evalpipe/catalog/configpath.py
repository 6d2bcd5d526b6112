"""Where configs are found: the shipped configs/ and the user folders searched before it."""

from __future__ import annotations

import os
from pathlib import Path

from evalpipe.core.configio import unknown_name
from evalpipe.core.errors import ConfigError

# User folders of presets, clusters, tasks and GPUs, searched before the shipped configs/.
CONFIG_PATH = "EVALPIPE_CONFIG_PATH"


def shipped_dir(name: str) -> Path:
    """A data folder that ships with evalpipe ("configs", "slurm_templates").

    An installed wheel holds it inside the package (pyproject.toml maps the repository's
    top-level folders there); a source checkout (editable install, PYTHONPATH) has it beside the
    package, at the repository's top level.
    """
    # The package's folder on disk, not importlib.resources: the same place for a package that
    # is not zipped (the only kind these folders are read from), without importing
    # importlib.resources, zipfile and tempfile into every command's start-up.
    package = Path(__file__).resolve().parents[1]
    packaged = package / name
    return packaged if packaged.is_dir() else package.parent / name


def config_dir() -> Path:
    """The shipped configs/ folder, or $EVALPIPE_CONFIG_DIR, which replaces it."""
    env = os.environ.get("EVALPIPE_CONFIG_DIR")
    return Path(env) if env else shipped_dir("configs")


def config_dirs() -> list[Path]:
    """Where presets, clusters, tasks and GPUs are looked up, first match first.

    The folders in $EVALPIPE_CONFIG_PATH (separated by ':' like PATH, each laid out like
    configs/), then config_dir(). A listed folder that does not exist is an error: a typo there
    would otherwise fall back to the shipped files without a word.
    """
    user = [Path(p).expanduser() for p in os.environ.get(CONFIG_PATH, "").split(os.pathsep) if p]
    for folder in user:
        if not folder.is_dir():
            raise ConfigError(
                f"{CONFIG_PATH} names {str(folder)!r}, which is not a folder; create it or "
                "remove it from the setting."
            )
    return [*user, config_dir()]


def find_file(folder: str, name: str) -> Path | None:
    """configs/<folder>/<name>.yaml from the first search folder that has it."""
    for root in config_dirs():
        path = root / folder / f"{name}.yaml"
        if path.is_file():
            return path
    return None


def is_path(name_or_path: str) -> bool:
    """Whether a --preset/--cluster value names a YAML file rather than a registry entry."""
    return name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path


def given_file(kind: str, name_or_path: str) -> Path | None:
    """The file a --preset/--cluster/--tasks value names, or None for a registry name."""
    if not is_path(name_or_path):
        return None
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"{kind.capitalize()} file {str(path)!r} does not exist.")
    return path


def resolve(kind: str, folder: str, name_or_path: str) -> tuple[str, Path]:
    """(name, file) for a registry name or a path to a YAML file of the same schema."""
    given = given_file(kind, name_or_path)
    if given is not None:
        return given.stem, given
    path = find_file(folder, name_or_path)
    if path is None:
        raise unknown_name(kind, name_or_path, names(folder))
    return name_or_path, path


def names(folder: str) -> list[str]:
    """Names of the YAML files in <folder>/ of every search folder, sorted."""
    return sorted({p.stem for root in config_dirs() for p in (root / folder).glob("*.yaml")})
