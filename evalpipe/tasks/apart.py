"""Reference packages installed apart from the virtualenv (`pip install --no-deps --target`, by
their scripts under scripts/): where each folder is, the refusal when it is missing, and the
versions its dist-info folders hold."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evalpipe.core.errors import MissingDependencyError

# Beside the checkout, where the scripts install them.
CACHE = Path(__file__).resolve().parents[2] / ".cache"


@dataclass(frozen=True, kw_only=True)
class ApartInstall:
    """One such folder: `.cache/<folder>` unless the variable `env` names another; installed
    when `marker` (a path inside it) exists. pyproject.toml's extras do not pin what is in it:
    `pins` (distribution → version) does, as its script installs them, checked by the kind."""

    needed_by: str  # "BFCL tasks need bfcl-eval", for the refusal
    folder: str
    env: str
    script: str  # e.g. scripts/bfcl.sh
    marker: str
    pins: Mapping[str, str] = field(default_factory=dict)

    @property
    def install(self) -> str:
        return f"bash {self.script} (make setup runs it)"

    def path(self) -> Path:
        """The folder, or MissingDependencyError naming the install command."""
        folder = Path(os.environ.get(self.env) or CACHE / self.folder)
        if not (folder / self.marker).exists():
            raise MissingDependencyError(
                f"{self.needed_by}, which is not installed in {folder} ({self.env} names "
                f"another folder). Install it with: {self.install}"
            )
        return folder.resolve()

    def version(self, distribution: str) -> str:
        """The installed version of `distribution`, from its dist-info folder ('' if none)."""
        stem = distribution.replace("-", "_")
        found = sorted(self.path().glob(f"{stem}-*.dist-info"))
        return found[-1].name.removeprefix(f"{stem}-").removesuffix(".dist-info") if found else ""
