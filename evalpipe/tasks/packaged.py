"""Text constants from the source of an installed reference package, read without importing it.

A benchmark's prompt belongs to its reference implementation (GPQA's to simple-evals): a task
file names the constant, and the prompt comes from the pinned package where evalpipe runs,
never a copy in this repository. Reading the module's source with `ast` keeps the package's own
(heavy) imports out of evalpipe, so `pip install --no-deps` of the package suffices.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import warnings
from pathlib import Path

from evalpipe.core.errors import ConfigError, MissingDependencyError
from evalpipe.tasks.packages import Source

# The packages shipped task files read constants from (pinned in pyproject.toml's extras).
SOURCES = {
    s.package: s
    for s in (
        Source("nvidia-simple-evals", "simple_evals"),
        Source("nvidia-livecodebench", "livecodebench"),
        Source("nvidia-hle", "hle_eval"),
    )
}


def source_of(module_file: str) -> Source:
    """The package `module_file` (PACKAGE/PATH.py) lies in, and the distribution it comes from:
    a shipped task's from SOURCES, another's from the installed metadata."""
    package = module_file.partition("/")[0]
    if package in SOURCES:
        return SOURCES[package]
    provided = importlib.metadata.packages_distributions().get(package) or [package]
    return Source(provided[0], package)


def package_file(module_file: str, name: str) -> Path:
    """Where the installed package holds `module_file` (PACKAGE/PATH.py), for reading `name`
    from it; MissingDependencyError naming how to install it when it is not installed."""
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
            f"not installed. Install it where evalpipe runs: {source_of(module_file).install()} "
            "(scripts/setup.sh does)."
        )
    return Path(next(iter(spec.submodule_search_locations))) / relative


@functools.cache
def package_constant(module_file: str, name: str) -> str:
    """The string assigned to `name` at the top of `module_file` (PACKAGE/PATH.py), or in a
    class's body for `CLASS.NAME`, literal or a literal's `.strip()`, as the module would hold
    it."""
    path = package_file(module_file, name)
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
    # The last assignment is the one the module holds once imported.
    assigned = [
        node.value
        for node in body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == attribute for t in node.targets)
    ]
    value = _string(assigned[-1]) if assigned else None
    if value is not None:
        return value
    raise MissingDependencyError(
        f"{path} assigns no string constant {name}; the installed "
        f"{module_file.partition('/')[0]!r} is not the "
        f"version the task expects ({source_of(module_file).install()})."
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
