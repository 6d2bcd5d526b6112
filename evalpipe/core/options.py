"""Options declared once: a record field names its flag, help, parsing and rule, and the command
line, the record's checks and the argv a job passes on are all derived from that declaration.

    limit: int | None = option(flag="--limit", group="selection", parse=positive_int,
                               check=positive, help="at most N samples per task")
    deterministic: bool = switch(flag="--deterministic", group="engine", help="...")
    judge: Endpoint = nested(Endpoint, prefix="judge-", group="judge")

A record may nest other records (`nested`): their options are flattened onto one command line,
a prefix telling two copies of one record apart (`--base-url` and `--judge-base-url`). Each
option's name is its flag without the dashes (`judge_base_url`): the argparse destination and
the keyword `record_from` takes. `add_options` puts a record's flags on a parser, `from_args`
builds the record from what it parsed, `to_argv` writes a record back as argv words that parse
to an equal record, and `check_options` (called by a record's `__post_init__`) applies each
field's rule.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.core.configio import unknown_name
from evalpipe.core.errors import ConfigError

_KEY = "evalpipe.option"
_NESTED = "evalpipe.nested"


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
    switch: bool = False  # a flag without a value: True when given, False when not
    # The value of the flag given alone (`--pilot`), for an option whose value is optional.
    const: str | None = None

    @property
    def name(self) -> str:
        """The argparse destination and the keyword: --judge-base-url → judge_base_url."""
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True, kw_only=True)
class Nested:
    """How a nested record's options appear: its flags prefixed, its groups replaced."""

    prefix: str = ""  # e.g. "judge-": --base-url becomes --judge-base-url
    group: str | None = None  # None: each option keeps its own group


@dataclass(frozen=True, kw_only=True)
class Leaf:
    """One option of a record, nested ones included: where it sits and how it appears."""

    path: tuple[str, ...]  # field names from the outer record down
    field: dataclasses.Field
    option: Option  # with the nesting's prefix and group applied


def option(*, default: Any = None, **declared: Any) -> Any:
    """A dataclass field that is also a command-line option (see `Option` for the keywords)."""
    return dataclasses.field(default=default, metadata={_KEY: Option(**declared)})


def count_option(**declared: Any) -> Any:
    """An option holding a positive count (a layout size, a limit, a concurrency)."""
    return option(parse=positive_int, check=positive, **declared)


def switch(**declared: Any) -> Any:
    """A boolean option: False unless its flag is given."""
    return option(default=False, switch=True, **declared)


def nested(cls: type, *, prefix: str = "", group: str | None = None) -> Any:
    """A field holding another options record, its options flattened onto the command line."""
    return dataclasses.field(
        default_factory=cls, metadata={_NESTED: Nested(prefix=prefix, group=group)}
    )


def _leaves(cls: type, path: tuple[str, ...], nesting: Nested) -> list[Leaf]:
    found = []
    for f in dataclasses.fields(cls):
        if _KEY in f.metadata:
            opt = f.metadata[_KEY]
            opt = dataclasses.replace(
                opt,
                flag="--" + nesting.prefix + opt.flag.removeprefix("--"),
                group=nesting.group or opt.group,
            )
            found.append(Leaf(path=(*path, f.name), field=f, option=opt))
        elif _NESTED in f.metadata:
            inner = f.metadata[_NESTED]
            combined = Nested(
                prefix=nesting.prefix + inner.prefix, group=nesting.group or inner.group
            )
            found += _leaves(f.default_factory, (*path, f.name), combined)  # type: ignore[arg-type]
    return found


def leaves(cls: type, *, groups: Collection[str] | None = None) -> list[Leaf]:
    """The record's options, nested ones included, in declaration order (the argv's order)."""
    return [
        leaf for leaf in _leaves(cls, (), Nested()) if groups is None or leaf.option.group in groups
    ]


def counts_option(**declared: Any) -> Any:
    """An option holding a comma-separated list of positive counts (lengths in tokens)."""
    return option(parse=counts, text=counts_text, check=some_counts, **declared)


def names_option(**declared: Any) -> Any:
    """An option holding a comma-separated list of names (categories, task references)."""
    return option(parse=names, text=names_text, check=some_names, **declared)


def options_of(cls: type) -> list[tuple[dataclasses.Field, Option]]:
    """The record's own option fields (not its nested records'), in declaration order."""
    return [(f, f.metadata[_KEY]) for f in dataclasses.fields(cls) if _KEY in f.metadata]


def value_at(record: object, path: tuple[str, ...]) -> Any:
    for name in path:
        record = getattr(record, name)
    return record


def check_options(record: object) -> None:
    """Every given value of the record's own options against its choices and rule; the error
    names the flag (a nested record checks its own when it is built)."""
    for f, opt in options_of(type(record)):
        value = getattr(record, f.name)
        if value is None:
            continue
        if opt.switch and not isinstance(value, bool):
            raise ConfigError(f"{opt.flag}: expected True or False, got {value!r}.")
        if opt.choices is not None and value not in opt.choices:
            raise ConfigError(f"{opt.flag} {value!r} is not one of {', '.join(opt.choices)}.")
        try:
            if opt.check is not None:
                opt.check(value)
        except ValueError as exc:
            raise ConfigError(f"{opt.flag}: {exc}.") from None


def flags_given(record: object, groups: Collection[str] | None = None) -> list[str]:
    """The flags of the record's options (in `groups`) set to other than their default."""
    return [
        leaf.option.flag
        for leaf in leaves(type(record), groups=groups)
        if value_at(record, leaf.path) != leaf.field.default
    ]


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    groups: Collection[str] | None = None,
    help_values: Mapping[str, str] | None = None,
) -> None:
    """Add `cls`'s options in `groups` (None: all) to `parser`, defaults from the record."""
    for leaf in leaves(cls, groups=groups):
        opt = leaf.option
        helped = opt.help.format_map(help_values or {})
        if opt.switch:
            parser.add_argument(opt.flag, dest=opt.name, action="store_true", help=helped)
            continue
        optional = {} if opt.const is None else {"nargs": "?", "const": opt.parse(opt.const)}
        parser.add_argument(
            opt.flag,
            dest=opt.name,
            type=opt.parse,
            choices=opt.choices,
            default=leaf.field.default,
            metavar=opt.metavar,
            help=helped,
            **optional,
        )


def _build(cls: type, values: dict[str, Any], path: tuple[str, ...], by_path: dict) -> Any:
    given: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        where = (*path, f.name)
        if _NESTED in f.metadata:
            given[f.name] = _build(f.default_factory, values, where, by_path)  # type: ignore[arg-type]
        elif where in by_path and by_path[where] in values:
            given[f.name] = values[by_path[where]]
    return cls(**given)


def record_from(cls: type, values: Mapping[str, Any]) -> Any:
    """The record from option names (`Option.name`, nested ones flattened) and values; a name
    that is none of its options is refused, listing them. Fields of `cls` that are not options
    (JobOptions' `run`) may be given by their field names."""
    by_path = {leaf.path: leaf.option.name for leaf in leaves(cls)}
    plain = [f.name for f in dataclasses.fields(cls) if not ({_KEY, _NESTED} & f.metadata.keys())]
    valid = [*by_path.values(), *plain]
    for name in values:
        if name not in valid:
            raise unknown_name("option", name, valid)
    record = _build(cls, dict(values), (), by_path)
    extra = {name: values[name] for name in plain if name in values}
    return dataclasses.replace(record, **extra) if extra else record


def from_args(
    cls: type, args: argparse.Namespace, *, groups: Collection[str] | None = None, **given: Any
) -> Any:
    """The record from parsed `args` (its options in `groups`); `given` (option names, or the
    record's plain fields) fills or overrides."""
    parsed = {
        leaf.option.name: getattr(args, leaf.option.name) for leaf in leaves(cls, groups=groups)
    }
    return record_from(cls, parsed | given)


def to_argv(record: object, *, groups: Collection[str] | None = None) -> list[tuple[str, ...]]:
    """The argv words of each option of `record` in `groups` that is given: (flag, text), or
    (flag,) for a switch that is on."""
    words: list[tuple[str, ...]] = []
    for leaf in leaves(type(record), groups=groups):
        value = value_at(record, leaf.path)
        opt = leaf.option
        if opt.switch:
            words += [(opt.flag,)] if value else []
        elif value is not None:
            words.append((opt.flag, opt.text(value)))
    return words


# ---- argument types and their inverses ----


def names(text: str) -> tuple[str, ...]:
    """A comma-separated list of names."""
    items = tuple(n.strip() for n in text.split(",") if n.strip())
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
    return items


def names_text(value: tuple[str, ...]) -> str:
    return ",".join(value)


def counts(text: str) -> tuple[int, ...]:
    """A comma-separated list of positive integers."""
    return tuple(positive_int(item) for item in names(text))


def counts_text(value: tuple[int, ...]) -> str:
    return ",".join(map(str, value))


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


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
        positive_seconds(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds, got {text!r}"
        ) from None
    return value


def float_text(value: float) -> str:
    """The shortest text that reads back as the same float (600, not 600.0)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


# ---- rules ----


def positive(value: object) -> None:
    """A positive integer (for a count the record owns)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"must be a positive integer, got {value!r}")


def positive_seconds(value: object) -> None:
    """A positive, finite number of seconds."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
        raise ValueError(f"must be a positive number of seconds, got {value!r}")


def some_counts(value: object) -> None:
    """A non-empty tuple of positive integers."""
    if not isinstance(value, tuple) or not value:
        raise ValueError(f"expected one or more positive integers, got {value!r}")
    for item in value:
        positive(item)


def some_names(value: object) -> None:
    """A non-empty tuple of non-empty names."""
    if (
        not isinstance(value, tuple)
        or not value
        or not all(isinstance(n, str) and n for n in value)
    ):
        raise ValueError(f"expected one or more names, got {value!r}")
