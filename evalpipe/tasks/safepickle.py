"""Decoding compressed, pickled dataset bytes without running code: plain data types only.

A pickle can name any importable callable and call it while loading (`os.system` through
`__reduce__`), so `pickle.loads` on downloaded bytes runs whatever the file's author chose.
Here:

- before anything is unpickled, every opcode is read with `pickletools.genops` and checked
  against the opcodes plain data needs (strings, bytes, numbers, booleans, None, lists, tuples,
  dicts, sets, the memo). Whatever names, builds or calls an object is refused — GLOBAL,
  STACK_GLOBAL, INST, OBJ, REDUCE, BUILD, NEWOBJ, persistent ids, and EXT1/2/4, which read
  `copyreg`'s extension cache without asking `find_class`;
- the unpickler then resolves no global at all, in case the list were ever widened.

Decompression stops at MAX_DECODED_BYTES and a pickle may hold at most MAX_OPCODES opcodes, so
a small zip bomb cannot fill the memory; every malformed input ends in a DatasetError naming
`what`, never in a traceback.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import struct
import zlib
from collections import deque
from typing import Any

from evalpipe.core.errors import DatasetError

# Bounds on what one field may cost: far above a test-case field, far below a node's memory
# (a 1 GB run of zeros compresses to a few MB). Each opcode makes at most one object.
MAX_DECODED_BYTES = 256 * 2**20
MAX_OPCODES = 2**20

# What plain data needs, by group: protocol and framing, scalars, text and bytes, containers, memo.
_PLAIN_OPCODES = frozenset((
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK",
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
    "LONG4", "FLOAT", "BINFLOAT",
    "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES",
    "BINBYTES8",
    "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS", "FROZENSET",
    "GET", "BINGET", "LONG_BINGET", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE",
))  # fmt: skip
_MEMO_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
# What a hostile or damaged pickle makes the parsers raise: data errors, not evalpipe bugs.
_MALFORMED = (
    pickle.UnpicklingError,
    ValueError,  # UnicodeDecodeError, struct and length errors included
    EOFError,
    TypeError,
    IndexError,
    KeyError,
    AttributeError,  # APPEND on a dict, SETITEMS on a list …
    OverflowError,
    struct.error,
    RecursionError,
    MemoryError,
)


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def decompress(data: bytes, *, what: str) -> bytes:
    """zlib-decompressed `data`, refused past MAX_DECODED_BYTES (DatasetError naming `what`)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, MAX_DECODED_BYTES)
        # At the cap, one more byte tells a longer stream from one that is cut short.
        beyond = b"" if inflater.eof else inflater.decompress(inflater.unconsumed_tail, 1)
    except zlib.error as exc:
        raise DatasetError(f"{what}: not zlib-compressed data ({exc})") from exc
    if beyond:
        raise DatasetError(
            f"{what}: decompresses to more than the cap of {MAX_DECODED_BYTES // 2**20} MiB "
            "(evalpipe.tasks.safepickle.MAX_DECODED_BYTES); a field that large is damaged or "
            "hostile, so check that the file comes from the dataset's publisher."
        )
    if not inflater.eof:
        raise DatasetError(f"{what}: the zlib stream is cut short")
    return out


def _check_opcodes(data: bytes) -> None:
    """Refuses, before loading, any opcode plain data does not need, more than MAX_OPCODES of
    them, and a memo index beyond the entries stored so far (the C unpickler would grow its memo
    to that index)."""
    strings: deque[str] = deque(maxlen=2)  # what a STACK_GLOBAL would name
    stored = 0
    for count, (op, arg, position) in enumerate(pickletools.genops(data)):
        if op.name not in _PLAIN_OPCODES:
            named = arg if isinstance(arg, str) else ".".join(strings)
            raise pickle.UnpicklingError(
                f"opcode {op.name} at byte {position} builds an object"
                + (f" (it names {named.replace(' ', '.')})" if named else "")
            )
        if count >= MAX_OPCODES:
            raise pickle.UnpicklingError(f"it holds more than {MAX_OPCODES:,} opcodes")
        if isinstance(arg, str):
            strings.append(arg)
        if op.name in _MEMO_PUTS and arg > stored:
            raise pickle.UnpicklingError(f"memo index {arg} at byte {position} skips ahead")
        stored += op.name in _MEMO_PUTS or op.name == "MEMOIZE"


def plain_loads(data: bytes, *, what: str) -> Any:
    """The plain value pickled in `data`; DatasetError naming `what` for anything else."""
    try:
        _check_opcodes(data)
        return _PlainUnpickler(io.BytesIO(data)).load()
    except _MALFORMED as exc:
        raise DatasetError(
            f"{what}: refused to unpickle it ({type(exc).__name__}: {str(exc)[:200]}). Only "
            "plain data (strings, numbers, lists, dicts) is loaded from a dataset's pickles, "
            "since loading anything else runs code the file chose; check that the file comes "
            "from the dataset's publisher."
        ) from exc
