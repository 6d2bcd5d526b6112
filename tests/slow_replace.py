"""`python tests/slow_replace.py SECONDS ARGS...`: `evalpipe ARGS...` with a pause of SECONDS
inside every atomic file replacement (evalpipe.rundir.samplelog), between writing the new file and
renaming it into place: a window too narrow for a random kill to hit otherwise
(tests/test_chaos.py kills runs there)."""

from __future__ import annotations

import os
import sys
import time
from typing import Union

from evalpipe.cli import main

StrPath = Union[str, "os.PathLike[str]"]


def pause_every_replace(seconds: float) -> None:
    """The package renames through os.replace, looked up when called, so this reaches it."""
    replace = os.replace

    def slow_replace(src: StrPath, dst: StrPath, **kwargs: int | None) -> None:
        time.sleep(seconds)
        replace(src, dst, **kwargs)

    os.replace = slow_replace


if __name__ == "__main__":
    pause_every_replace(float(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
