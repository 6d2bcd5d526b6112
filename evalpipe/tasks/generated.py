"""Offline evaluation sets evalpipe generates itself, deterministic by (set, split, seed).

They give the CPU demo and CI non-trivial numbers with no network: easy enough that a 135M
instruct model scores clearly above chance, structured so that guessing scores at chance.
Rows have the same shape as the hub datasets they imitate (GSM8K answers with `#### N`,
multiple choice with choices + answer index, HumanEval problems), so the same scorers apply.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from typing import Any

Row = dict[str, Any]

NAMES = ("Ava", "Ben", "Cleo", "Dan", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jo", "Kim", "Liam")
ITEMS = ("apples", "books", "marbles", "pencils", "stickers", "cookies", "cards", "shells")
WORDS = (
    "apple", "banana", "cherry", "grape", "lemon", "mango", "orange", "peach", "pear", "plum",
    "river", "stone", "table", "window", "garden", "candle", "forest", "island", "rocket", "violin",
)  # fmt: skip
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
DEFAULT_SIZE = {"arithmetic": 200, "ordering": 200, "pyfuncs": 56}


def generate(name: str, *, split: str, size: int | None = None, seed: int = 0) -> list[Row]:
    """`size` rows of set `name`; another split or seed gives an independent draw."""
    # A string seed is hashed with SHA-512 by `random`, so it is stable across processes.
    rng = random.Random(f"{name}/{split}/{seed}")
    rows = GENERATORS[name](rng, size or DEFAULT_SIZE[name])
    return [{"id": f"{name}-{i:04d}", **row} for i, row in enumerate(rows)]


def _each(make: Callable[[random.Random], Row]) -> Callable[[random.Random, int], list[Row]]:
    return lambda rng, size: [make(rng) for _ in range(size)]


# --- arithmetic word problems (math; GSM8K-style reference answers) ------------------------


def _arithmetic(rng: random.Random) -> Row:
    who, friend = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    kind = rng.choice(("add", "subtract", "multiply", "divide", "two_step"))
    if kind == "add":
        a, b = rng.randint(2, 30), rng.randint(2, 30)
        question = f"{who} has {a} {item}. {friend} gives {who} {b} more {item}. "
        question += f"How many {item} does {who} have now?"
        work, result = f"{a} + {b} = {a + b}", a + b
    elif kind == "subtract":
        a = rng.randint(10, 50)
        b = rng.randint(1, a - 1)
        question = f"{who} had {a} {item} and gave {b} of them to {friend}. "
        question += f"How many {item} does {who} have left?"
        work, result = f"{a} - {b} = {a - b}", a - b
    elif kind == "multiply":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        question = f"There are {a} boxes with {b} {item} in each box. "
        question += f"How many {item} are there in total?"
        work, result = f"{a} * {b} = {a * b}", a * b
    elif kind == "divide":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        question = f"{who} shares {a * b} {item} equally among {b} friends. "
        question += f"How many {item} does each friend get?"
        work, result = f"{a * b} / {b} = {a}", a
    else:
        a, b = rng.randint(5, 30), rng.randint(2, 20)
        c = rng.randint(1, a + b - 1)
        question = f"{who} has {a} {item}, buys {b} more and then gives {c} to {friend}. "
        question += f"How many {item} does {who} have now?"
        work, result = f"{a} + {b} = {a + b}, {a + b} - {c} = {a + b - c}", a + b - c
    return {"question": question, "answer": f"{work}\n#### {result}", "kind": kind}


# --- ordering and simple logic, four options each (reasoning; chance = 1/4) -----------------


def _ordering(rng: random.Random) -> Row:
    kind = rng.choice(("largest", "smallest", "tallest", "shortest", "alphabet", "tomorrow"))
    if kind in ("largest", "smallest"):
        options = [str(n) for n in rng.sample(range(1, 100), 4)]
        pick = max if kind == "largest" else min
        answer = str(pick(int(o) for o in options))
        question = f"Which of these numbers is the {kind}?"
    elif kind in ("tallest", "shortest"):
        people = rng.sample(NAMES, 4)  # people[0] is the tallest
        facts = [f"{people[i]} is taller than {people[i + 1]}." for i in range(3)]
        rng.shuffle(facts)
        question = " ".join(facts) + f" Who is the {kind}?"
        options = list(people)
        answer = people[0] if kind == "tallest" else people[-1]
    elif kind == "alphabet":
        options = rng.sample(WORDS, 4)
        answer = min(options)
        question = "Which word comes first in alphabetical order?"
    else:
        today = rng.randrange(7)
        answer = DAYS[(today + 1) % 7]
        others = [d for d in DAYS if d != answer]
        options = [answer, *rng.sample(others, 3)]
        question = f"Today is {DAYS[today]}. What day is tomorrow?"
    rng.shuffle(options)
    return {"question": question, "choices": options, "answer": options.index(answer), "kind": kind}


# --- small Python functions in HumanEval format (coding) ------------------------------------


def _function(
    name: str, signature: tuple[str, str], doc: str, body: str, example: str, tests: list[str]
) -> Row:
    params, returns = signature
    prompt = f'def {name}({params}) -> {returns}:\n    """{doc}\n    >>> {example}\n    """\n'
    test = "def check(candidate):\n" + "".join(f"    assert {t}\n" for t in tests)
    return {
        "prompt": prompt,
        "canonical_solution": f"    return {body}\n",
        "test": test,
        "entry_point": name,
    }


FUNCTION_KINDS = ("add", "multiply", "multiple", "count", "repeat", "greater", "first")


def _pyfuncs(rng: random.Random, size: int) -> list[Row]:
    # Distinct (kind, k) problems first; only a set larger than all 56 of them repeats one.
    problems = [(kind, k) for kind in FUNCTION_KINDS for k in range(2, 10)]
    rng.shuffle(problems)
    return [_pyfunc(rng, *problems[i % len(problems)]) for i in range(size)]


def _pyfunc(rng: random.Random, kind: str, k: int) -> Row:
    xs = [rng.randint(-5, 15) for _ in range(6)]
    if kind == "add":
        name = f"add_{k}"
        row = _function(
            name, ("x: int", "int"), f"Return x plus {k}.", f"x + {k}",
            f"{name}(1)\n    {1 + k}", [f"candidate({x}) == {x + k}" for x in (0, 5, -3, 40)],
        )  # fmt: skip
    elif kind == "multiply":
        name = f"times_{k}"
        row = _function(
            name, ("x: int", "int"), f"Return x multiplied by {k}.", f"x * {k}",
            f"{name}(2)\n    {2 * k}", [f"candidate({x}) == {x * k}" for x in (0, 3, -4, 11)],
        )  # fmt: skip
    elif kind == "multiple":
        name = f"is_multiple_of_{k}"
        row = _function(
            name, ("x: int", "bool"), f"Return True if x is a multiple of {k}, else False.",
            f"x % {k} == 0", f"{name}({2 * k})\n    True",
            [f"candidate({x}) == {x % k == 0}" for x in (k, 3 * k, k + 1, 1, 0)],
        )  # fmt: skip
    elif kind == "count":
        c = string.ascii_lowercase[k]
        name = f"count_{c}"
        samples = ["", c * 3, f"x{c}y{c}", "zzz", f"{c}bc{c}{c}"]
        row = _function(
            name, ("s: str", "int"), f"Return how many times the letter {c!r} occurs in s.",
            f"s.count({c!r})", f"{name}({(c + 'z' + c)!r})\n    2",
            [f"candidate({s!r}) == {s.count(c)}" for s in samples],
        )  # fmt: skip
    elif kind == "repeat":
        name = f"repeat_{k}_times"
        row = _function(
            name, ("s: str", "str"), f"Return the string s repeated {k} times.", f"s * {k}",
            f"{name}('ab')\n    {'ab' * k!r}",
            [f"candidate({s!r}) == {s * k!r}" for s in ("x", "", "hi")],
        )  # fmt: skip
    elif kind == "greater":
        name = f"count_greater_than_{k}"
        row = _function(
            name, ("xs: list", "int"), f"Return how many numbers in xs are greater than {k}.",
            f"sum(1 for x in xs if x > {k})", f"{name}([{k}, {k + 1}, {k + 5}])\n    2",
            [f"candidate({xs}) == {sum(1 for x in xs if x > k)}", "candidate([]) == 0"],
        )  # fmt: skip
    else:
        name = f"first_{k}"
        row = _function(
            name, ("xs: list", "list"), f"Return a list of the first {k} elements of xs.",
            f"xs[:{k}]", f"{name}(list(range(10)))\n    {list(range(10))[:k]}",
            [f"candidate({xs}) == {xs[:k]}", "candidate([1]) == [1]"],
        )  # fmt: skip
    return {**row, "kind": kind}


GENERATORS: dict[str, Callable[[random.Random, int], list[Row]]] = {
    "arithmetic": _each(_arithmetic),
    "ordering": _each(_ordering),
    "pyfuncs": _pyfuncs,
}
