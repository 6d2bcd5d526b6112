"""Options declared once: a record field names its flag, help, parsing and rule, and the command
line, the record's checks and the argv a job passes on are all derived from that declaration.

    limit: int | None = option(flag="--limit", group="selection", parse=positive_int,
                               check=positive, help="at most N samples per task")

`add_options` puts a record's flags on a parser, `from_args` builds the record from what it
parsed, `to_argv` writes a record back as (flag, text) pairs that parse to an equal record, and
`check_options` (called by the record's `__post_init__`) applies each field's rule.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.core.errors import ConfigError

_KEY = "evalpipe.option"


@dataclass(frozen=True, kw_only=True)
class Option:
    """How one record field appears on a command line."""

    flag: str
    # Which commands take it: a command adds the groups it needs. The help may hold {names}
    # that the command fills in (what a default means differs between commands).
    group: str
    help: str
    parse: Callable[[str], Any] = str  # argparse's `type`: argparse.ArgumentTypeError if malformed
    text: Callable[[Any], str] = str  # the inverse of `parse`, for a job's argv
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    # The record's rule for a given value (None is "not given" and always passes): ValueError
    # with what is wrong, or ConfigError with the whole message.
    check: Callable[[Any], None] | None = None


def option(*, default: Any = None, **declared: Any) -> Any:
    """A dataclass field that is also a command-line option (see `Option` for the keywords)."""
    return dataclasses.field(default=default, metadata={_KEY: Option(**declared)})


def count_option(**declared: Any) -> Any:
    """An option holding a positive count (a layout size, a limit, a concurrency)."""
    return option(parse=positive_int, check=positive, **declared)


def options_of(cls: type) -> list[tuple[dataclasses.Field, Option]]:
    """The record's option fields, in declaration order (which is the argv's order)."""
    return [(f, f.metadata[_KEY]) for f in dataclasses.fields(cls) if _KEY in f.metadata]


def _chosen(cls: type, groups: Collection[str] | None) -> list[tuple[dataclasses.Field, Option]]:
    return [(f, o) for f, o in options_of(cls) if groups is None or o.group in groups]


def check_options(record: object) -> None:
    """Every given value against its option's choices and rule; the error names the flag."""
    for f, opt in options_of(type(record)):
        value = getattr(record, f.name)
        if value is None:
            continue
        if opt.choices is not None and value not in opt.choices:
            raise ConfigError(f"{opt.flag} {value!r} is not one of {', '.join(opt.choices)}.")
        try:
            if opt.check is not None:
                opt.check(value)
        except ValueError as exc:
            raise ConfigError(f"{opt.flag}: {exc}.") from None


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    groups: Collection[str] | None = None,
    help_values: Mapping[str, str] | None = None,
) -> None:
    """Add `cls`'s options in `groups` (None: all) to `parser`, defaults from the record."""
    for f, opt in _chosen(cls, groups):
        parser.add_argument(
            opt.flag,
            dest=f.name,
            type=opt.parse,
            choices=opt.choices,
            default=f.default,
            metavar=opt.metavar,
            help=opt.help.format_map(help_values or {}),
        )


def from_args(
    cls: type, args: argparse.Namespace, *, groups: Collection[str] | None = None, **given: Any
) -> Any:
    """The record from parsed `args` (its options in `groups`); `given` fills or overrides."""
    return cls(**{f.name: getattr(args, f.name) for f, _ in _chosen(cls, groups)} | given)


def to_argv(record: object, *, groups: Collection[str] | None = None) -> list[tuple[str, str]]:
    """(flag, text) for each option of `record` in `groups` that is given (not None)."""
    return [
        (opt.flag, opt.text(value))
        for f, opt in _chosen(type(record), groups)
        if (value := getattr(record, f.name)) is not None
    ]


# ---- argument types and their inverses ----


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names."""
    items = tuple(n.strip() for n in text.split(",") if n.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
    return items


def names_text(value: tuple[str, ...]) -> str:
    return ",".join(value)


def _int_from(text: str, minimum: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_from(text, 1, "a positive integer")


def count(text: str) -> int:
    return _int_from(text, 0, "0 or a positive integer")


def float_text(value: float) -> str:
    """The shortest text that reads back as the same float (600, not 600.0)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


# ---- rules ----


def positive(value: object) -> None:
    """A positive integer (for a count the record owns)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"must be a positive integer, got {value!r}")


def some_names(value: object) -> None:
    """A non-empty tuple of non-empty names."""
    if (
        not isinstance(value, tuple)
        or not value
        or not all(isinstance(n, str) and n for n in value)
    ):
        raise ValueError(f"expected one or more names, got {value!r}")
