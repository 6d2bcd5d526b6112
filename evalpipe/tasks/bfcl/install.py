"""Where bfcl-eval is installed (apart from the virtualenv, by scripts/bfcl.sh) and how a child
process of evalpipe's reaches it: the folder last on its sys.path, so the virtualenv's packages
win, and BFCL_PROJECT_ROOT a folder of its own, where bfcl-eval's import side effects create
their result/ and score/ folders."""

from __future__ import annotations

import sys
from pathlib import Path

from evalpipe.core.errors import MissingDependencyError
from evalpipe.tasks.apart import ApartInstall

# Where scripts/bfcl.sh installs it, beside the checkout; EVALPIPE_BFCL_DIR names another.
BFCL_EVAL = ApartInstall(needed_by="BFCL tasks need bfcl-eval", folder="bfcl-eval",
                         env="EVALPIPE_BFCL_DIR", script="scripts/bfcl.sh",
                         marker="bfcl_eval/data")  # fmt: skip


def bfcl_dir() -> Path:
    """The folder holding bfcl_eval, or MissingDependencyError naming the install command."""
    return BFCL_EVAL.path()


def check_memory_kv() -> None:
    """memory_kv's simulated API imports rank-bm25, which scripts/bfcl.sh installs beside
    bfcl-eval (a folder installed before memory_kv ran lacks it): MissingDependencyError naming
    the reinstall, before anything loads."""
    if not (bfcl_dir() / "rank_bm25.py").exists():
        raise MissingDependencyError(
            f"BFCL's memory_kv needs rank-bm25 (its simulated memory API imports it), which "
            f"{bfcl_dir()} lacks. Reinstall it with: {BFCL_EVAL.install}"
        )


def bfcl_version() -> str:
    """The installed bfcl-eval's version, from its dist-info folder (recorded with each task)."""
    return BFCL_EVAL.version("bfcl-eval")


def sandbox_data(**data: object) -> dict[str, object]:
    """What a sandboxed BFCL program is sent besides `data`: the runner's import paths (the
    sandbox starts with the standard library alone) and bfcl-eval's folder, which the program
    puts last on its path so the virtualenv's packages win."""
    path = [p for p in sys.path if p and Path(p).is_dir()]
    return {"path": path, "bfcl": str(bfcl_dir()), **data}
