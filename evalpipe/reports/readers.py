"""Read a run directory's metrics.csv into pandas, tolerating damage: warn, keep what is
readable (the JSON and JSONL files have their typed readers in evalpipe.rundir).

A file that exists but cannot be opened (permissions, I/O) is an error: the report would
silently lack it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from evalpipe.core.errors import RunDirError
from evalpipe.monitor import COLUMNS as METRICS_COLUMNS


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
