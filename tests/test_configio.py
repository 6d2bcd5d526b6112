"""The strict YAML loader: unknown keys and names are refused with suggestions."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from evalpipe.core.configio import build, unknown_name
from evalpipe.core.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Inner:
    size: int


@dataclass(frozen=True, kw_only=True)
class Outer:
    name: str
    inner: Inner
    tags: tuple[str, ...] = ()


def test_builds_nested_dataclasses_and_tuples() -> None:
    got = build(Outer, {"name": "x", "inner": {"size": 3}, "tags": ["a", "b"]}, "f.yaml")
    assert got == Outer(name="x", inner=Inner(size=3), tags=("a", "b"))


def test_unknown_key_suggests_and_lists_valid_keys() -> None:
    with pytest.raises(ConfigError) as err:
        build(Outer, {"name": "x", "inner": {"sise": 3}}, "f.yaml")
    msg = str(err.value)
    assert "f.yaml.inner: unknown key 'sise'. Did you mean 'size'?" in msg
    assert "Valid keys: size." in msg


def test_missing_key_is_named() -> None:
    with pytest.raises(ConfigError, match="missing required key"):
        build(Outer, {"name": "x"}, "f.yaml")


def test_unknown_name_suggests_closest() -> None:
    err = unknown_name("preset", "falcon40b", ["falcon_40b", "llama2_70b"])
    assert "Did you mean 'falcon_40b'?" in str(err)
    assert "Known presets: falcon_40b, llama2_70b." in str(err)


def test_unknown_name_pluralises_the_kind() -> None:
    assert "Known categories: math." in str(unknown_name("category", "maths", ["math"]))


def test_read_yaml_returns_fresh_copies_and_sees_edits(tmp_path) -> None:
    from evalpipe.core.configio import read_yaml

    path = tmp_path / "p.yaml"
    path.write_text("a: {b: 1}\n")
    first = read_yaml(path)
    first["a"]["b"] = 99  # a caller mutating its copy must not change the next read
    assert read_yaml(path) == {"a": {"b": 1}}
    path.write_text("a: {b: 22}\n")  # size changes, so the cached parse is not reused
    assert read_yaml(path) == {"a": {"b": 22}}
