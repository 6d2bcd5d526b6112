"""Decoding pickled dataset bytes without running code: plain data types only.

A pickle can name any importable callable and call it while loading (`os.system` through
`__reduce__`), so `pickle.loads` on downloaded bytes runs whatever the file's author chose.
The unpickler here resolves no global at all: strings, bytes, numbers, booleans, None, lists,
tuples, dicts and sets load (their opcodes need no lookup); anything naming a class or function
is refused before it is called.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from evalpipe.core.errors import DatasetError


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def plain_loads(data: bytes, *, what: str) -> Any:
    """The plain value pickled in `data`; DatasetError naming `what` for anything else."""
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as exc:
        raise DatasetError(
            f"{what}: refused to unpickle it ({exc}). Only plain data (strings, numbers, lists, "
            "dicts) is loaded from a dataset's pickles, since loading anything else runs code "
            "the file chose; check that the file comes from the dataset's publisher."
        ) from exc
