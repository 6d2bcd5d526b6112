"""<kind>_results.json: a task kind's own results document for a completed run, in the shape its
benchmark's tools read (lm-eval's results JSON for lm-eval's kind). The kind makes the document
(evalpipe/tasks/kindbase.py, `TaskKind.results`); this module only owns the file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_json, write_json


def write_kind_results(files: RunDir, kind: str, document: Mapping[str, Any]) -> None:
    """Replace kind `kind`'s results document atomically."""
    write_json(files.kind_results(kind), dict(document))


def read_kind_results(files: RunDir, kind: str) -> dict[str, Any] | None:
    """Kind `kind`'s results document; None when the run keeps none (it ran no task of a kind
    that keeps one, or has not completed). What the document must hold is the kind's to check."""
    path = files.kind_results(kind)
    return read_json(path) if path.exists() else None
