"""Read one run directory's files, tolerating damage: warn, keep what is readable.

A run killed mid-write leaves a truncated last line in samples.jsonl; an old evalpipe writes
another schema; a CPU-only run has no GPU metrics. None of these should hide the rest of a
report, so readers append a warning naming the file and return what they could read. A file that
exists but cannot be opened (permissions, I/O) is an error: the report would silently lack it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.core.errors import RunDirError
from evalpipe.monitor import COLUMNS as METRICS_COLUMNS
from evalpipe.rundir.layout import SCHEMA  # the run-directory schema this reader understands


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RunDirError(f"Cannot read {str(path)!r}: {exc.strerror}.") from exc


def read_json(path: Path, warnings: list[str]) -> dict[str, Any] | None:
    """The JSON object in `path`; None (with a warning when damaged) when absent or unusable."""
    if not path.exists():
        return None
    try:
        data = json.loads(_read_bytes(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        warnings.append(f"{path}: not valid JSON ({exc}); ignored it.")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{path}: holds a {type(data).__name__}, not a JSON object; ignored it.")
        return None
    schema = data.get("schema")
    if schema != SCHEMA:
        age = "newer" if isinstance(schema, int) and schema > SCHEMA else "older or unknown"
        warnings.append(
            f"{path}: schema {schema!r} is {age} (this evalpipe reads schema {SCHEMA}); "
            "reporting the fields it recognises."
        )
    return data


def read_samples(path: Path, warnings: list[str]) -> list[dict[str, Any]] | None:
    """The sample records of a samples.jsonl, skipping lines that are not whole JSON objects.

    None when the file does not exist. A damaged last line is the normal trace of a run killed
    while writing; a damaged line elsewhere is reported by its number.
    """
    if not path.exists():
        return None
    text = _read_bytes(path).decode("utf-8", errors="replace")
    numbered = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    # Fast path: one parse of the whole file as a JSON array (a single call into the C scanner
    # instead of one per line); any damage falls back to the line-by-line reading below.
    try:
        records = json.loads("[" + ",".join(line for _, line in numbered) + "]")
    except json.JSONDecodeError:
        records = None
    if records is not None and len(records) == len(numbered) and all(map(_is_sample, records)):
        return records

    records, bad = [], []
    for number, line in numbered:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if _is_sample(record):
            records.append(record)
        else:
            bad.append(number)
    last = numbered[-1][0] if numbered else 0
    if bad and bad[-1] == last:
        warnings.append(
            f"{path}: last line {last} is truncated (the run was killed or is still writing); "
            "ignored it."
        )
        bad.pop()
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" …" if len(bad) > 10 else "")
        warnings.append(
            f"{path}: {len(bad)} line(s) are not sample records ({shown}); ignored them."
        )
    return records


def _is_sample(record: Any) -> bool:
    return (
        type(record) is dict
        and type(record.get("task")) is str
        and record.get("sample_id") is not None
        and type(record.get("scores")) is dict
    )


def read_metrics(path: Path, warnings: list[str]) -> pd.DataFrame | None:
    """The monitor's time series (metrics.csv) with its known columns; None when absent."""
    if not path.exists():
        return None
    try:
        frame = pd.read_csv(path, on_bad_lines="skip")
    except pd.errors.EmptyDataError:
        warnings.append(f"{path}: empty; no memory or utilisation curves for this run.")
        return None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        warnings.append(f"{path}: not readable as CSV ({exc}); ignored it.")
        return None
    except OSError as exc:
        raise RunDirError(f"Cannot read {str(path)!r}: {exc.strerror}.") from exc
    missing = [c for c in ("time_s", "device") if c not in frame.columns]
    if missing:
        warnings.append(f"{path}: lacks column(s) {', '.join(missing)}; ignored it.")
        return None
    for column in METRICS_COLUMNS:
        if column not in frame.columns:
            frame[column] = pd.NA
    numeric = [c for c in METRICS_COLUMNS if c not in ("host", "device", "phase")]
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce")
    frame = frame.dropna(subset=["time_s"])
    frame["host"] = frame["host"].fillna("").astype(str)
    frame["device"] = frame["device"].astype(str)
    frame["phase"] = frame["phase"].fillna("").astype(str)
    return frame[list(METRICS_COLUMNS)]
