"""Multiple-choice protocols of simple-evals (nvidia-simple-evals 26.3): GPQA's option shuffling,
and the answer extraction of its GPQA and MMLU-Pro evaluations.

The reference's own code runs beside these in bench/agree_mcq.py, on the same completions.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence
from typing import Any

Row = dict[str, Any]


def permutations(seed: int, count: int, size: int) -> list[list[int]]:
    """`count` permutations of range(size), drawn in order from one generator seeded `seed`:
    simple-evals' gpqa_eval gives row i of repeat r draw r * rows + i (its rows repeated in
    blocks), so a row's option order depends on its position in the whole split."""
    rng = random.Random(seed)
    return [rng.sample(range(size), size) for _ in range(count)]


def shuffled_rows(
    rows: Sequence[Row], columns: Sequence[str], *, seed: int, repeats: int
) -> list[tuple[int, Row]]:
    """(repeat, row with `choices`, `answer` and `permutation`) for every repeat of every row,
    repeat by repeat.

    The options are the `columns` (the correct one first) in the permutation's order; `answer`
    is the index of the first option equal to the correct text, as the reference finds it
    (choices.index)."""
    perms = permutations(seed, repeats * len(rows), len(columns))
    out = []
    for draw, perm in enumerate(perms):
        repeat, row = divmod(draw, len(rows))
        options = [str(rows[row][columns[i]]) for i in perm]
        answer = options.index(str(rows[row][columns[0]]))
        out.append(
            (repeat, rows[row] | {"choices": options, "answer": answer, "permutation": perm})
        )
    return out


# --- extraction ------------------------------------------------------------------------------


def extract_answer_line(text: str, choices: Sequence[str]) -> str | None:
    """GPQA (simple-evals ANSWER_PATTERN_MULTICHOICE): the first "Answer: X" with X an option
    letter in either case (a lowercase letter is kept as written, so it scores as wrong), on
    the raw completion."""
    last = string.ascii_uppercase[len(choices) - 1]
    match = re.search(rf"(?i)Answer[ \t]*:[ \t]*([A-{last}])", text)
    return match.group(1) if match else None


# simple-evals' normalize_response: markdown and LaTeX removed, in this order, before MMLU-Pro's
# patterns look at a completion.
_UNMARK = (
    "**", "$\\boxed{", "}$", "\\$", "$\\text{", "$", "\\mathrm{", "\\{", "\\text", "\\(",
    "\\mathbf{", "{", "\\boxed",
)  # fmt: skip

# MMLU-Pro (simple-evals' mmlu_pro_aa_v3 extraction, Artificial Analysis' v3 method): the first
# stage with any match wins, and within it the last match. Strict "Answer: X" first, then ever
# looser forms down to any capital letter before a non-word character.
_STAGES = tuple(
    re.compile(p, re.MULTILINE | re.DOTALL)
    for p in (
        r"(?i)[\*\_]{0,2}Answer[\*\_]{0,2}\s*:[\s\*\_]{0,2}\s*([A-Z])(?![a-zA-Z0-9])",
        r"\\boxed\{[^}]*([A-Z])[^}]*\}",
        r"answer is ([a-zA-Z])",
        r"answer is \(([a-zA-Z])\)",
        r"([A-Z])\)\s*[^A-Z]*",
        r"([A-Z])\s+is\s+the\s+correct\s+answer",
        r"([A-Z])\s*$",
        r"([A-Z])\s*\.",
        r"([A-Z])\s*[^\w]",
    )
)


def normalize_response(text: str) -> str:
    for mark in _UNMARK:
        text = text.replace(mark, "")
    return text


def extract_answer_stages(text: str, choices: Sequence[str] = ()) -> str | None:
    """MMLU-Pro: the letter of the first matching stage (last match within it), on the
    normalised completion; None when no stage matches (scored 0 and counted as no answer;
    TIGER-Lab's evaluate_from_local guesses a random letter there instead)."""
    text = normalize_response(text)
    for stage in _STAGES:
        found = [m.group(1) for m in stage.finditer(text)]
        if found and found[-1].strip():
            return found[-1].strip()
    return None
