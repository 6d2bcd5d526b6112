"""A task's date window: only rows dated within [since, until] are evaluated.

LiveCodeBench is contamination-aware through it: a model is scored on problems published after
its training data ends. Dates are compared by their day (the first ten characters of an ISO
date or date-time), both ends included, as LiveCodeBench's own filter does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalpipe.catalog.taskfiles import parse_day
from evalpipe.core.errors import DatasetError


@dataclass(frozen=True, kw_only=True)
class DateWindow:
    """`field`: the record column holding each row's date; `since`/`until`: YYYY-MM-DD, each
    optional, both included."""

    field: str
    since: str | None = None
    until: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"dates.field must name a column, got {self.field!r}")
        for key in ("since", "until"):
            value = getattr(self, key)
            if value is not None:  # stored as text: YAML reads an unquoted date as a date
                object.__setattr__(self, key, parse_day(value, f"dates.{key}").isoformat())
        if self.since and self.until and self.since > self.until:
            raise ValueError(
                f"dates.since {self.since} is after dates.until {self.until}; the window is empty"
            )

    def moved(self, since: str | None, until: str | None) -> DateWindow:
        """This window with the ends that are given (not None) replaced."""
        return DateWindow(
            field=self.field,
            since=self.since if since is None else since,
            until=self.until if until is None else until,
        )

    def keeps(self, row: dict[str, Any], task: str) -> bool:
        if self.field not in row:
            raise DatasetError(
                f"Task {task!r}: dates.field {self.field!r} is not a column; the row's columns "
                f"are {', '.join(sorted(row))}."
            )
        try:
            day = parse_day(row[self.field], self.field).isoformat()
        except ValueError as exc:
            raise DatasetError(f"Task {task!r}: {exc}") from exc
        return (self.since is None or self.since <= day) and (
            self.until is None or day <= self.until
        )
