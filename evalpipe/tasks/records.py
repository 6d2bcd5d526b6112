"""Raw dataset rows → records: the task's field mapping applied, and the scorer's reference.

A record holds every column of the row under its own name, plus the mapped fields (`fields:`
in the task file: name → column, dots reaching into nested columns). Multiple-choice records
are normalised so every dataset looks alike: `choices` (texts), `letters` (A, B, …), and the
answer as `answer_index`, `answer_letter` and `answer_text`, whatever the dataset's own
convention (index, label, "(B)", or the option text).
"""

from __future__ import annotations

import re
import string
from typing import Any

from evalpipe.core.errors import DatasetError
from evalpipe.tasks.config import ScorerConfig

Record = dict[str, Any]

# BIG-Bench-Hard style inline options: a line "(A) text".
_INLINE_OPTION = re.compile(r"^\s*\(([A-Z])\)\s*(.+?)\s*$", re.MULTILINE)


def build_record(row: dict[str, Any], fields: dict[str, str], scorer: ScorerConfig) -> Record:
    """The record for one row; DatasetError names a missing column or an unreadable answer."""
    record: Record = dict(row)
    for name, path in fields.items():
        record[name] = lookup(row, path)
    missing = [f for f in scorer.required_fields() if f not in record]
    if missing:
        raise DatasetError(
            f"records lack field(s) {', '.join(missing)}; the row's columns are "
            f"{', '.join(sorted(row))}. Map them under `fields:` in the task file "
            "(e.g. fields: {question: input})."
        )
    if scorer.facts.options:
        record.update(_choices(record))
    return record


def lookup(row: dict[str, Any], path: str) -> Any:
    """The value at a column path; dots reach into nested columns (choices.text)."""
    value: Any = row
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise DatasetError(
                f"column {path!r} (from `fields:`) is not in the row; its columns are "
                f"{', '.join(sorted(row))}."
            )
        value = value[part]
    return value


def _choices(record: Record) -> Record:
    choices = record.get("choices")
    if choices is None:
        found = _INLINE_OPTION.findall(str(record["question"]))
        choices = [text for _, text in found]
        if [label for label, _ in found] != list(string.ascii_uppercase[: len(found)]):
            raise DatasetError(
                "multiple-choice record has no `choices` field and its question does not list "
                "options as lines '(A) …', '(B) …'; map a choices column under `fields:`."
            )
    if not isinstance(choices, list) or not 2 <= len(choices) <= 26:
        raise DatasetError(f"choices must be a list of 2 to 26 options, got {choices!r}")
    choices = [str(c) for c in choices]
    letters = list(string.ascii_uppercase[: len(choices)])
    labels = [str(x) for x in record.get("labels") or letters]
    if len(labels) != len(choices):
        raise DatasetError(f"labels {labels!r} do not match the {len(choices)} choices")
    index = _answer_index(record["answer"], choices, labels, letters)
    return {
        "choices": choices,
        "letters": letters,
        "answer_index": index,
        "answer_letter": letters[index],
        "answer_text": choices[index],
    }


def _answer_index(answer: Any, choices: list[str], labels: list[str], letters: list[str]) -> int:
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(choices):
        return answer
    text = str(answer).strip()
    bare = text.strip("()").strip()
    for candidates in (labels, letters, choices):
        for value in (text, bare):
            if value in candidates:
                return candidates.index(value)
    raise DatasetError(
        f"answer {answer!r} is neither an index, a label ({', '.join(labels)}) nor one of the "
        f"choices {choices!r}."
    )
