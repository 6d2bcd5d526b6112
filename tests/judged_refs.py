"""The reference packages the HLE and SimpleQA tests compare with, and HLE questions written here.

nvidia-hle is found where evalpipe runs (scripts/setup.sh installs it --no-deps) or in
.cache/bench-hle (`pip install --no-deps --target .cache/bench-hle nvidia-hle==26.3`);
simple-evals' SimpleQA, which must import, in .cache/bench-simple-evals (`make bench`)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDERS = {
    "hle_eval": REPO / ".cache" / "bench-hle",
    "simple_evals": REPO / ".cache" / "bench-simple-evals",
}
INSTALL = {
    "hle_eval": "pip install --no-deps nvidia-hle==26.3 (scripts/setup.sh)",
    "simple_evals": "make bench (installs .cache/bench-simple-evals)",
}


def reference(package: str, monkeypatch: pytest.MonkeyPatch, *, importable: bool) -> Path:
    """The installed `package`'s folder; `importable`: its own imports must resolve too (the
    folder apart has its dependencies, the --no-deps install has not). Skips when absent."""
    folder = FOLDERS[package]
    missing = importable or importlib.util.find_spec(package) is None
    if missing and (folder / package).is_dir():
        monkeypatch.syspath_prepend(str(folder))
        # The run's phases are processes of their own: they find it on PYTHONPATH.
        paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed: {INSTALL[package]}")
    return Path(next(iter(spec.submodule_search_locations)))


def hle_questions(path: Path, count: int = 6) -> Path:
    """HLE-shaped test rows (cais/hle's columns), every third with an image; answers are the
    digits the fake engine's answers may end with."""
    rows = [
        {"id": f"q{i:03d}", "question": f"Which digit is question {i} about?",
         "image": "data:image/png;base64,AAAA" if i % 3 == 2 else "", "answer": str(i % 10),
         "answer_type": "exactMatch" if i % 2 else "multipleChoice", "category": "Math",
         "raw_subject": "Arithmetic", "author_name": "evalpipe", "rationale": "", "canary": ""}
        for i in range(count)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
