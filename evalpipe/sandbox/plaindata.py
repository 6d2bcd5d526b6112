"""Plain Python data as JSON text and back: the only shape in which values cross between a
solution's process and its test process (docs/sandbox.md, "The verdict").

Only exact built-in types are encoded (None, bool, int, float, complex, str, bytes, and lists,
tuples, dicts, sets and frozensets of them), so nothing decoded on the test side carries code
the solution wrote: a subclass with its own `__eq__` is refused, not flattened. Standard library
only: the sandbox server imports this file by its bare name (`python -I -S worker.py`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

MAX_DEPTH = 200  # nesting beyond this is refused on both sides, not a RecursionError


class NotPlainData(TypeError):
    """A value outside the plain data this module carries."""


def encode(value: Any, depth: int = 0) -> Any:
    """`value` as a tagged JSON-ready structure; NotPlainData names the first type refused."""
    if depth > MAX_DEPTH:
        raise NotPlainData(f"data nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return ["int", hex(value)]  # hex: no digit limit, exact
    if kind is float:
        return ["float", value.hex()]  # exact, and keeps nan, inf and -0.0
    if kind is complex:
        return ["complex", value.real.hex(), value.imag.hex()]
    if kind is bytes:
        return ["bytes", base64.b64encode(value).decode()]
    if kind in (list, tuple, set, frozenset):
        return [kind.__name__, [encode(item, depth + 1) for item in value]]
    if kind is dict:
        pairs = [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]
        return ["dict", pairs]
    raise NotPlainData(f"a value of type {kind.__qualname__} is not plain data")


def decode(data: Any, depth: int = 0) -> Any:
    """The value `encode` described; ValueError for anything `encode` cannot have written."""
    if depth > MAX_DEPTH:
        raise ValueError(f"data nested deeper than {MAX_DEPTH} levels")
    if data is None or type(data) in (bool, str):
        return data
    if type(data) is not list or not data or type(data[0]) is not str:
        raise ValueError(f"not encoded plain data: {str(data)[:80]!r}")
    tag, *rest = data
    if tag == "int" and len(rest) == 1 and type(rest[0]) is str:
        return int(rest[0], 16)
    if tag == "float" and len(rest) == 1 and type(rest[0]) is str:
        return float.fromhex(rest[0])
    if tag == "complex" and len(rest) == 2 and all(type(x) is str for x in rest):
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag == "bytes" and len(rest) == 1 and type(rest[0]) is str:
        return base64.b64decode(rest[0], validate=True)
    if tag in ("list", "tuple", "set", "frozenset") and len(rest) == 1 and type(rest[0]) is list:
        items = [decode(item, depth + 1) for item in rest[0]]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict" and len(rest) == 1 and type(rest[0]) is list:
        out = {}
        for pair in rest[0]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError(f"not a key-value pair: {str(pair)[:80]!r}")
            out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
        return out
    raise ValueError(f"not encoded plain data: {str(data)[:80]!r}")


def dumps(value: Any) -> bytes:
    """One message: `value` encoded, as a line of ASCII JSON."""
    return json.dumps(encode(value), ensure_ascii=True).encode() + b"\n"


def loads(line: bytes) -> Any:
    """The value in one `dumps` line."""
    return decode(json.loads(line))
