"""Verdicts model code cannot write: a solution with `tests` is judged by a process it shares
nothing with but plain data, so every way of forging a pass from inside the solution fails."""

from __future__ import annotations

import math
import textwrap

import pytest

from evalpipe.sandbox import plaindata
from evalpipe.sandbox.pool import Program, run_programs

# Every attack goes inside a solution whose answer is wrong, so only a forged verdict passes.
TESTS = "assert abs(add(1, 2) - 3) < 1\nassert len([add(-1, 1)]) == 1 and add(-1, 1) == 0\n"
ATTACKS = {
    "caller-frame-nonce": """
        import os, sys
        nonce = sys._getframe(1).f_locals["nonce"]
        os.write(3, nonce + b" ok\\n")
        os._exit(0)
    """,
    "every-frame-nonce": """
        import os, sys
        f = sys._getframe()
        while f is not None:
            for v in f.f_locals.values():
                if isinstance(v, bytes) and len(v) == 32:
                    for fd in range(3, 64):
                        try:
                            os.write(fd, v + b" ok\\n")
                        except OSError:
                            pass
            f = f.f_back
        os._exit(0)
    """,
    "gc-nonce-every-fd": """
        import gc, os
        found = [o for o in gc.get_objects() if isinstance(o, dict)]
        secrets = {v for d in found for v in d.values() if isinstance(v, bytes) and len(v) == 32}
        for s in secrets:
            for fd in range(0, 256):
                try:
                    os.write(fd, s + b" ok\\n")
                except OSError:
                    pass
        os._exit(0)
    """,
    "ok-on-every-fd": """
        import os
        for fd in range(0, 256):
            try:
                os.write(fd, b"ok\\n")
            except OSError:
                pass
    """,
    "kill-the-parent": """
        import os, signal
        for pid in (os.getppid(), 1, -1):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    """,
    "exit-early": "import os\nos._exit(0)",
    "system-exit": "raise SystemExit(0)",
    "patched-builtins": """
        import builtins
        builtins.AssertionError = type("Quiet", (Exception,), {})
        builtins.abs = lambda x: 0
        builtins.__build_class__ = None
    """,
    "shadowed-builtin": """
        global abs, len
        abs, len = (lambda x: 0), (lambda x: 1)
    """,
    "atexit-exit": """
        import atexit, os, sys
        atexit.register(os._exit, 0)
        atexit.register(sys.exit, 0)
        sys.exit(0)
    """,
}


def _solution(attack: str, where: str) -> str:
    body = textwrap.indent(textwrap.dedent(attack).strip(), "    ")
    if where == "on load":
        return f"def add(a, b):\n    return 0\n\n{textwrap.dedent(attack).strip()}\n"
    return f"def add(a, b):\n{body}\n    return 0\n"


class Always(int):
    pass


@pytest.mark.parametrize("where", ["on load", "when called"])
def test_no_attack_from_inside_the_solution_passes(where: str) -> None:
    programs = [Program(source=_solution(a, where), tests=TESTS) for a in ATTACKS.values()]
    # An object that equals everything cannot cross: only plain data does.
    programs.append(
        Program(
            source="class Yes(int):\n    def __eq__(self, other):\n        return True\n"
            "    __hash__ = int.__hash__\n\ndef add(a, b):\n    return Yes(0)\n",
            tests=TESTS,
        )
    )
    results = run_programs(programs, timeout_s=5)
    names = [*ATTACKS, "equal-to-all"]
    assert {n: r.status for n, r in zip(names, results, strict=True)} == dict.fromkeys(
        names, "failed"
    )


HONEST = [
    # (solution, tests, passes)
    ("def add(a, b):\n    print('adding', a, b)\n    return a + b\n", TESTS, True),
    ("def add(a, b):\n    return a - b\n", TESTS, False),
    ("import math\ndef f(x):\n    return math.sqrt(x)\n",
     "assert abs(f(2.0) - math.sqrt(2)) < 1e-12\nassert math.isnan(f(float('nan')))\n", True),
    ("def f(xs):\n    return sorted(set(xs)), tuple(xs), {x: [x] for x in xs}, frozenset(xs)\n",
     "assert f([2, 1, 2]) == ([1, 2], (2, 1, 2), {2: [2], 1: [1]}, frozenset({1, 2}))\n", True),
    ("def f(s):\n    return s.encode()[::-1], None, True, 3 + 4j, 10 ** 5000\n",
     "assert f('ab') == (b'ba', None, True, 3 + 4j, 10 ** 5000)\n", True),
    ("def f(x):\n    raise ValueError('no')\n",
     "try:\n    f(1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\n", True),
    ("def f(x):\n    raise ValueError('no')\n", "f(1)\n", False),
    ("def helper(x):\n    return 2 * x\ndef f(x):\n    return helper(x)\nLIMIT = [1, 2]\n",
     "assert f(2) == helper(2) == 4 and LIMIT == [1, 2]\nassert f(x=3) == 6\n", True),
    ("def f():\n    return (x for x in range(3))\n", "assert list(f()) == [0, 1, 2]\n", False),
    ("syntax error here\n", "pass\n", False),
    ("def f():\n    while True:\n        pass\n", "f()\n", False),
]  # fmt: skip


def test_honest_solutions_keep_their_verdicts() -> None:
    programs = [Program(source=s, tests=t) for s, t, _ in HONEST]
    results = run_programs(programs, timeout_s=2)
    assert [r.passed for r in results] == [passes for _, _, passes in HONEST]
    assert results[-1].status == "timeout"
    assert "adding 1 2" in results[0].output_tail  # the solution's output is still shown


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(10**400), 1.5, -0.0, math.inf, 2 + 3j, "é\ud800", b"\x00\xff",
     [1, (2, {3: frozenset({4})})], {"a": {1.0, 2}}],
)  # fmt: skip
def test_plain_data_round_trips_exactly(value) -> None:
    back = plaindata.loads(plaindata.dumps(value))
    assert back == value and type(back) is type(value)
    assert repr(back) == repr(value)  # -0.0 stays -0.0, nested types stay what they were


@pytest.mark.parametrize(
    "value", [Always(1), object(), [print], {1: iter([])}, type("S", (str,), {})("x")]
)
def test_anything_but_exact_built_in_data_is_refused(value) -> None:
    with pytest.raises(plaindata.NotPlainData):
        plaindata.dumps(value)


@pytest.mark.parametrize(
    "line", [b'["int", 5]', b'{"a": 1}', b'["evil", "x"]', b"NaN", b'["dict", [[1]]]']
)
def test_only_what_encode_writes_decodes(line: bytes) -> None:
    with pytest.raises(ValueError):
        plaindata.loads(line)
