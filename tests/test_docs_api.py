"""The Python API the docs show: every import line in README.md and docs/*.md still imports."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r"^\s*((?:from evalpipe[\w.]* import [\w, ]+)|(?:import evalpipe[\w.]*))\s*$")


def _doc_imports() -> list[tuple[str, str]]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            if match := IMPORT.match(line):
                found.append((doc.name, match.group(1)))
    return found


def test_the_docs_show_imports() -> None:
    assert len(_doc_imports()) >= 5  # the scan itself still finds the docs' API sections


@pytest.mark.parametrize(("doc", "statement"), _doc_imports())
def test_an_import_the_docs_show_works(doc: str, statement: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", statement], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, f"{doc}: {statement!r} fails: {done.stderr[-400:]}"
