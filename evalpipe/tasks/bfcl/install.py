"""Where bfcl-eval is installed (apart from the virtualenv, by scripts/bfcl.sh) and how a child
process of evalpipe's reaches it: the folder last on its sys.path, so the virtualenv's packages
win, and BFCL_PROJECT_ROOT a folder of its own, where bfcl-eval's import side effects create
their result/ and score/ folders."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from evalpipe.core.errors import MissingDependencyError

# Where scripts/bfcl.sh installs it, beside the checkout; EVALPIPE_BFCL_DIR names another.
DEFAULT_DIR = Path(__file__).resolve().parents[3] / ".cache" / "bfcl-eval"
ENV = "EVALPIPE_BFCL_DIR"
INSTALL = "bash scripts/bfcl.sh (make setup runs it)"


def bfcl_dir() -> Path:
    """The folder holding bfcl_eval, or MissingDependencyError naming the install command."""
    folder = Path(os.environ.get(ENV) or DEFAULT_DIR)
    if not (folder / "bfcl_eval" / "data").is_dir():
        raise MissingDependencyError(
            f"BFCL tasks need bfcl-eval, which is not installed in {folder} ({ENV} names another "
            f"folder). Install it with: {INSTALL}"
        )
    return folder.resolve()


def bfcl_version() -> str:
    """The installed bfcl-eval's version, from its dist-info folder (recorded with each task)."""
    found = sorted(bfcl_dir().glob("bfcl_eval-*.dist-info"))
    return found[-1].name.removeprefix("bfcl_eval-").removesuffix(".dist-info") if found else ""


def sandbox_data(**data: object) -> dict[str, object]:
    """What a sandboxed BFCL program is sent besides `data`: the runner's import paths (the
    sandbox starts with the standard library alone) and bfcl-eval's folder, which the program
    puts last on its path so the virtualenv's packages win."""
    path = [p for p in sys.path if p and Path(p).is_dir()]
    return {"path": path, "bfcl": str(bfcl_dir()), **data}
