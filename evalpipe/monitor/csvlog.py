"""metrics.csv: the columns, one row per device and sample, and reading it back (repairing a
row cut short by a kill) so a resumed run continues its time and energy."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.monitor.devicesummary import DeviceSummary, Tally, summarise
from evalpipe.monitor.readings import READING_FIELDS, Reading, log

COLUMNS = (
    "time_s",
    "host",
    "device",
    "phase",
    "memory_used_gib",
    "memory_total_gib",
    "util_pct",
    "mem_util_pct",
    "temperature_c",
    "power_w",
    "sm_clock_mhz",
    "energy_j",
)
# Decimal places written per column: GiB to ~1 MiB, energy to the counter's 1 mJ.
DIGITS = {
    "time_s": 3,
    "memory_used_gib": 3,
    "memory_total_gib": 3,
    "util_pct": 1,
    "mem_util_pct": 1,
    "temperature_c": 0,
    "power_w": 3,
    "sm_clock_mhz": 0,
    "energy_j": 3,
}


def row(t: float, host: str, device: str, phase: str, r: Reading) -> list[str]:
    labels = {"host": host, "device": device, "phase": phase}
    values = {"time_s": t, **{k: getattr(r, k) for k in READING_FIELDS}}
    return [labels[c] if c in labels else _fmt(values[c], DIGITS[c]) for c in COLUMNS]


def restore(path: Path, tallies: dict[tuple[str, str], Tally]) -> tuple[bool, float]:
    """Load an earlier attempt's rows into `tallies`: (whether a header must be written, the
    latest time_s). A row cut short by a kill is dropped from the file; a file with other
    columns is moved aside."""
    if not path.exists() or path.stat().st_size == 0:
        return True, 0.0
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        # A row cut short by a kill: drop it rather than glue the next row onto it.
        text = text[: text.rfind("\n") + 1]
        path.write_text(text, encoding="utf-8")
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        return True, 0.0
    if tuple(header) != COLUMNS:
        aside = path.with_name(path.name + ".old")
        log.warning(
            "%s has other columns than this version writes (%s); moved to %s.",
            path,
            ",".join(header),
            aside,
        )
        path.replace(aside)
        return True, 0.0
    return False, tally_rows(reader, tallies, path)


def device_summaries(paths: Sequence[Path]) -> list[DeviceSummary]:
    """Per-(host, device) summaries from metrics files: the other nodes' series of a multi-node
    run (beside the runner's own Monitor.stop()), or a run's files for a report whose
    summary.json lists no devices. Name and uuid are not in the CSV (None); energy_source is
    None too, since the CSV does not say how energy was measured."""
    tallies: dict[tuple[str, str], Tally] = {}
    for path in paths:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            if tuple(next(reader, ())) != COLUMNS:
                log.warning("%s is not a metrics file of this version; left out.", path)
                continue
            tally_rows(reader, tallies, path)
    return [summarise(key, tally, None) for key, tally in tallies.items()]


@dataclass(frozen=True, kw_only=True)
class Row:
    """One device's reading at one sample, as metrics.csv holds it."""

    time_s: float
    host: str
    device: str
    phase: str
    reading: Reading


def new_rows(path: Path, offset: int) -> tuple[list[Row], int]:
    """The complete rows written to metrics.csv from byte `offset` on (0: the start, header
    skipped), and the offset after them: a reader that follows the file while the monitor
    appends to it. A line still being written waits for the next call; a malformed one is
    skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    rows = []
    for values in csv.reader(chunk[:end].decode("utf-8").splitlines()):
        if len(values) != len(COLUMNS) or tuple(values) == COLUMNS:
            continue
        fields = dict(zip(COLUMNS, values, strict=True))
        try:
            reading = Reading(**{k: _number(fields[k]) for k in READING_FIELDS})
            t = _number(fields["time_s"]) or 0.0
        except ValueError:
            continue
        rows.append(
            Row(
                time_s=t,
                host=fields["host"],
                device=fields["device"],
                phase=fields["phase"],
                reading=reading,
            )
        )
    return rows, offset + end


def tally_rows(
    reader: Iterable[list[str]], tallies: dict[tuple[str, str], Tally], path: Path
) -> float:
    """Add CSV rows (header already read) to per-(host, device) tallies; the latest time_s."""
    latest, skipped = 0.0, 0
    for values in reader:
        try:
            if len(values) != len(COLUMNS):
                raise ValueError(f"{len(values)} fields")
            fields = dict(zip(COLUMNS, values, strict=True))
            reading = Reading(**{k: _number(fields[k]) for k in READING_FIELDS})
            t = _number(fields["time_s"]) or 0.0
        except ValueError:
            skipped += 1  # e.g. a row cut short by a kill, in a file not yet repaired
            continue
        tallies.setdefault((fields["host"], fields["device"]), Tally()).add(reading)
        latest = max(latest, t)
    if skipped:
        log.warning("%s: %d malformed rows left out of the summary.", path, skipped)
    return latest


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return ""
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _number(text: str) -> float | None:
    return float(text) if text else None
