"""Answer extraction from messy completions: option letters, final numbers and code blocks.

Pure text functions; equivalence of math answers lives in scorers.py (math-verify).
"""

from __future__ import annotations

import re
import string

# --- multiple choice -------------------------------------------------------------------------

_L = r"[\(\[\*\s]*([A-Za-z])[\)\]\*]*"  # a letter, maybe in (), [] or **bold**
# "The answer is (B)", "answer: b", "Correct option: **C**", "I choose D".
_ANCHORED = re.compile(
    r"(?:answer|option|choice|choose|select|pick)(?:\s+(?:is|would be|should be|=))?"
    r"(?:\s*(?:option|choice))?\s*[:\-]?" + _L + r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
# A completion that starts with the letter: "B", "B)", "(B) Paris", "B. Paris", "**C**", "c)".
_LEADING = re.compile(r"^[\s\*]*(?:\(([A-Za-z])\)|([A-Za-z])(?:[\)\.:\*]|\s*$|\s*\n))")
# A letter marked as an option anywhere: "(B)" or "**B**".
_MARKED = re.compile(r"\(([A-Z])\)|\*\*([A-Z])\*\*")
_ANSWER_WORD = re.compile(r"answer\s*(?:is|:)?\s*", re.IGNORECASE)


def extract_letter(text: str, choices: list[str]) -> str | None:
    """The option letter a completion picks among `choices`, or None when it picks none.

    In order: an anchored statement ("the answer is (B)"), a leading letter ("B) …"), the one
    letter marked as an option ("(C)", "**C**"), then the options' own text (after "answer
    is", or the only option the completion names). Only letters of existing options count.
    """
    letters = string.ascii_uppercase[: len(choices)]
    for match in _ANCHORED.finditer(text):
        letter = match.group(1)
        # A lowercase letter followed by a word is an article ("the answer is a bit unclear").
        if letter.islower() and re.match(r"\s+\w", text[match.end() :]):
            continue
        if letter.upper() in letters:
            return letter.upper()
    match = _LEADING.match(text)
    if match:
        letter = (match.group(1) or match.group(2)).upper()
        if letter in letters:
            return letter
    marked = {m.group(1) or m.group(2) for m in _MARKED.finditer(text)} & set(letters)
    if len(marked) == 1:  # several marked letters: the completion lists options, picks none
        return marked.pop()
    return _by_option_text(text, choices)


def _normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _by_option_text(text: str, choices: list[str]) -> str | None:
    norm_choices = [_normalise(c) for c in choices]
    tails = [text[m.end() :] for m in _ANSWER_WORD.finditer(text)]
    for tail in [*tails, text]:  # "the answer is Paris", then a completion that is an option
        norm = _normalise(tail)
        starts = [i for i, c in enumerate(norm_choices) if c and (norm + " ").startswith(c + " ")]
        if starts:
            best = max(starts, key=lambda i: len(norm_choices[i]))  # "New York City" over "New"
            return string.ascii_uppercase[best]
    padded = f" {_normalise(text)} "
    named = [i for i, c in enumerate(norm_choices) if c and f" {c} " in padded]
    # Names contained in a longer named option ("York" in "New York") do not count twice.
    named = [
        i for i in named if not any(j != i and norm_choices[i] in norm_choices[j] for j in named)
    ]
    return string.ascii_uppercase[named[0]] if len(named) == 1 else None


# --- numbers ---------------------------------------------------------------------------------

_NUMBER = r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+"
_HASHES = re.compile(r"####\s*\$?\s*(" + _NUMBER + ")")
_ANY_NUMBER = re.compile(_NUMBER)


def _clean_number(raw: str) -> str:
    return raw.replace(",", "")


def extract_hashes(text: str) -> str | None:
    """The number after the first `#### ` (GSM8K's final-answer convention), commas removed."""
    match = _HASHES.search(text)
    return _clean_number(match.group(1)) if match else None


def extract_last_number(text: str) -> str | None:
    """The last number in the text ("1,000" → "1000", "-3.50" kept), or None."""
    numbers = _ANY_NUMBER.findall(text)
    return _clean_number(numbers[-1]) if numbers else None


# --- code ------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
# Text before the first fence that is itself code: the continuation of a prompt that opened
# the fence, now being closed ("    return x\n```").
_CODE_START = re.compile(r"^\s*?(?:[ \t]+\S|def |class |import |from |return |@|#)")


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The program in a completion.

    In order: a fenced block defining `entry_point`; code up to a closing fence when the
    completion continues a fence its prompt opened; the first Python fenced block; the text.
    """
    first = text.find("```")
    if first < 0:
        return text
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if entry_point:
        defining = re.compile(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", re.MULTILINE)
        for _, body in blocks:
            if defining.search(body):
                return body
    before = text[:first]
    if before.strip() and _CODE_START.match(before):
        return before
    python = [body for lang, body in blocks if lang in ("python", "py", "python3", "")]
    return (python or [body for _, body in blocks] or [before])[0]
