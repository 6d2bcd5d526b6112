"""Text constants from the source of an installed reference package, read without importing it.

A benchmark's prompt belongs to its reference implementation (GPQA's to simple-evals): a task
file names the constant, and the prompt comes from the pinned package where evalpipe runs,
never a copy in this repository. Reading the module's source with `ast` keeps the package's own
(heavy) imports out of evalpipe, so `pip install --no-deps` of the package suffices.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import warnings
from pathlib import Path

from evalpipe.core.errors import ConfigError, MissingDependencyError


@functools.cache
def package_constant(module_file: str, name: str) -> str:
    """The string assigned to `name` at the top of `module_file` (PACKAGE/PATH.py), or in a
    class's body for `CLASS.NAME`, literal or a literal's `.strip()`, as the module would hold
    it."""
    package, _, relative = module_file.partition("/")
    # find_spec("a.b") imports `a`, running its code, and `..` would leave the package: a task
    # file names a top-level package and a file inside it.
    if not package.isidentifier() or Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise ConfigError(
            f"package_constant({module_file!r}, {name!r}): the file must be PACKAGE/PATH.py, a "
            "top-level package name (no dots) and a path inside it (no '..', not absolute)."
        )
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(
            f"A task's prompt is the constant {name} of the Python package {package!r}, which is "
            f"not installed. Install it where evalpipe runs: {_INSTALL.get(package, package)} "
            "(scripts/setup.sh does)."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    try:
        with warnings.catch_warnings():  # the package's own invalid escapes are not ours to report
            warnings.simplefilter("ignore")
            tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as exc:
        raise MissingDependencyError(f"Cannot read {path} for {name}: {exc}.") from exc
    owner, _, attribute = name.rpartition(".")
    body = tree.body
    if owner:
        body = next(
            (n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner), []
        )
    for node in body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == attribute for t in node.targets
        ):
            value = _string(node.value)
            if value is not None:
                return value
    raise MissingDependencyError(
        f"{path} assigns no string constant {name}; the installed {package!r} is not the "
        f"version the task expects ({_INSTALL.get(package, package)})."
    )


def _string(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (  # """…""".strip()
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "strip"
        and not node.args
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    ):
        return node.func.value.value.strip()
    return None


# How to install the packages shipped task files read constants from (pinned as in pyproject).
_INSTALL = {
    "simple_evals": "pip install --no-deps 'nvidia-simple-evals==26.3'",
    "livecodebench": "pip install --no-deps 'nvidia-livecodebench==26.3'",
}
