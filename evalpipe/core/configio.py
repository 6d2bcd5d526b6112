"""Strict YAML → frozen dataclass loading: unknown keys are refused with a suggestion."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import re
import types
import typing
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from evalpipe.core.errors import ConfigError, UnknownNameError

T = TypeVar("T")
H = TypeVar("H", bound=Hashable)
# A shell variable name: what a config may name as an environment variable.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def suggest(name: str, choices: typing.Iterable[str]) -> str:
    """' Did you mean 'x'?' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"


def plural(noun: str) -> str:
    """English plural of a registry noun ('category' → 'categories', 'GPU' → 'GPUs')."""
    return noun[:-1] + "ies" if noun.endswith("y") else noun + "s"


def unknown_name(kind: str, name: str, choices: typing.Iterable[str]) -> UnknownNameError:
    """The error for a name missing from a registry, with near matches and the full list."""
    names = sorted(choices)
    return UnknownNameError(
        f"Unknown {kind} {name!r}.{suggest(name, names)} Known {plural(kind)}: {', '.join(names)}."
    )


# libyaml's parser where PyYAML was built with it (the wheels are): ~10x faster than pure Python.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Parsed files by (path, mtime, size): a sweep or a 1,000-job render reads gpus.yaml and the
# same presets over and over.
_PARSED: dict[tuple[str, int, int], dict[str, Any]] = {}


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file's top-level mapping (a fresh copy); syntax errors and non-mappings name it."""
    try:
        stat = path.stat()
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        if key not in _PARSED:
            _PARSED[key] = _parse(path, path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc.strerror}.") from exc
    return copy.deepcopy(_PARSED[key])


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path} must hold a mapping of keys to values, not {type(data).__name__}."
        )
    return data


# Resolving a dataclass's string annotations compiles code each time; they never change.
_type_hints = functools.cache(typing.get_type_hints)


def build(cls: type[T], data: Any, where: str) -> T:
    """Construct dataclass `cls` from a mapping, recursing into nested dataclass fields.

    `where` names the file (and key path) in every message, so a typo deep in a preset is found
    without reading a traceback.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping for {cls.__name__}, got {data!r}.")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for key in data:
        if key not in fields:
            raise ConfigError(
                f"{where}: unknown key {key!r}.{suggest(str(key), fields)} "
                f"Valid keys: {', '.join(sorted(fields))}."
            )
    hints = _type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        kwargs[name] = _convert(hints[name], value, f"{where}.{name}")
    missing = missing_fields(cls, kwargs)
    if missing:
        raise ConfigError(f"{where}: missing required key(s) {', '.join(missing)}.")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def missing_fields(cls: type, given: typing.Container[str]) -> list[str]:
    """The fields of dataclass `cls` without a default that `given` lacks."""
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in given
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]


def _convert(hint: Any, value: Any, where: str) -> Any:
    """Recurse into dataclasses, tuples and optionals; leave other values to the class checks."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        if len(args) == 1:
            return _convert(args[0], value, where)
        return value
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, where)
    if origin is tuple and isinstance(value, list):
        (item,) = typing.get_args(hint)[:1] or (Any,)
        return tuple(_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    return value


def as_config(record: Any) -> Any:
    """A frozen config record as plain data for a run's configuration and fingerprint.

    A dataclass may list fields added after runs were first recorded in a `LATER` class
    attribute: left at their defaults they are not written, so the fingerprint of a run made
    before they existed is unchanged and the run still resumes. Fields no result depends on
    (`UNRECORDED`) are never written."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        later = getattr(record, "LATER", ())
        unrecorded = getattr(record, "UNRECORDED", ())
        return {
            f.name: as_config(getattr(record, f.name))
            for f in dataclasses.fields(record)
            if f.name not in unrecorded
            and not (f.name in later and getattr(record, f.name) == _default(f))
        }
    if isinstance(record, list | tuple):
        return [as_config(item) for item in record]
    if isinstance(record, dict):
        return {key: as_config(value) for key, value in record.items()}
    return record


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def first_repeat(keys: Iterable[H]) -> H | None:
    """The first key that occurs a second time, or None when all are distinct."""
    seen: set[H] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return None


def check_positive(where: str, **values: int | None) -> None:
    """Each given value is a positive integer or None (ValueError naming the key otherwise)."""
    for key, value in values.items():
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{key} must be a positive integer, got {value!r} ({where})")
