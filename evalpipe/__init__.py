"""evalpipe: vLLM-backed evaluation of large open models, sized and submitted as SLURM jobs.

    import evalpipe
    result = evalpipe.evaluate(preset="tiny_random", tasks=["arithmetic"], limit=4)

The API loads its layers on first use (PEP 562 `__getattr__`): `import evalpipe`, and the
login-node commands that import it, load none of the run's modules (docs/python.md).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Each public name and the module that defines it.
_API = {
    "evaluate": "evalpipe.run.session",
    "RunResult": "evalpipe.run.session",
    "Preset": "evalpipe.catalog.preset",
    "load_preset": "evalpipe.catalog.preset",
}
__all__ = ["Preset", "RunResult", "__version__", "evaluate", "load_preset"]  # _API, the version


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'evalpipe' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value  # the next lookup finds it without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
