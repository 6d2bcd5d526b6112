"""Hostile and malformed dataset fields through LiveCodeBench's test decoder: no code runs, no
traceback escapes, every refusal is a DatasetError naming the problem and its field."""

from __future__ import annotations

import base64
import copyreg
import json
import os
import pickle
import pickletools
import random
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalpipe.core.errors import DatasetError
from evalpipe.tasks.livecodebench import decode_tests
from evalpipe.tasks.safepickle import MAX_DECODED_BYTES, MAX_OPCODES

WHAT = "LiveCodeBench problem 'fx' private tests"
TESTS = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
EXT_CODE = 0xE0  # a copyreg extension code (one byte, for EXT1) registered for the test's duration
OPCODE_BYTES = [op.code.encode("latin-1") for op in pickletools.opcodes]


def pack(pickled: bytes) -> str:
    return base64.b64encode(zlib.compress(pickled)).decode()


class _System:
    """Pickles as a call to os.system(command)."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (self.command,))


def hostile(marker: Path) -> list[bytes]:
    """Hand-built pickles that would touch `marker` if anything they name were called."""
    cmd = f"touch {marker}"
    text = cmd.encode()
    utf8 = len(text).to_bytes(4, "little")
    return [
        *(pickle.dumps(_System(cmd), protocol=p) for p in range(6)),
        pickle.dumps([{"input": _System(cmd), "output": "3"}], protocol=4),
        b"cos\nsystem\n(S'" + text + b"'\ntR.",  # GLOBAL + REDUCE
        b"(S'" + text + b"'\nios\nsystem\n.",  # INST
        b"(cos\nsystem\nS'" + text + b"'\no.",  # OBJ
        b"\x80\x02cos\nsystem\nX" + utf8 + text + b"\x85R.",  # protocol 2
        b"\x80\x02\x82" + bytes([EXT_CODE]) + b"X" + utf8 + text + b"\x85R.",
        b"\x80\x02\x83" + EXT_CODE.to_bytes(2, "little") + b"X" + utf8 + text + b"\x85R.",
        b"\x80\x02\x84" + EXT_CODE.to_bytes(4, "little") + b"X" + utf8 + text + b"\x85R.",
        b"\x80\x02(X" + utf8 + text + b"\x85cos\nsystem\n\x81.",  # NEWOBJ
        b"(lp0\nS'x'\nb.",  # BUILD on a list
        b"P" + text + b"\n.",  # persistent id
        b"\x80\x04]\x94(X" + utf8 + text + b"\x94h\x00e.",  # memo self-reference
    ]


def malformed() -> list[bytes]:
    """Pickles that name nothing but break the unpickler or the JSON that follows."""
    nested = 200_000
    return [
        b"\x80\x05" + b"]" * nested + b"a" * (nested - 1) + b".",  # a list nested 200,000 deep
        pickle.dumps("[" * nested),  # JSON nested past Python's recursion limit
        pickle.dumps(b"\xff\xfe\xfd not utf-8"),
        pickle.dumps("1" * 100_000),  # an integer past int's digit limit
        pickle.dumps(json.dumps([{"input": 1, "output": "2"}])),
        pickle.dumps({"input": "1"}),
        b"\x80\x04]r\xf0\xff\xff\xff.",  # LONG_BINPUT at index 4 billion: a 32 GB memo
        b"\x80\x04\x8d" + (2**62).to_bytes(8, "little") + b"ab.",  # BINUNICODE8 past the end
        b"\x80\x04X\x02\x00\x00\x00\xff\xfe.",  # invalid UTF-8
        b"\x80\x04}a.",  # APPEND to a dict
        b"\x80\x04]K\x01K\x02s.",  # SETITEM on a list
        b"\x80\x04h\x07.",  # GET of an empty memo
        b"\x80\x04e.",  # APPENDS without a MARK
        b"\x80\x04\x95" + (2**60).to_bytes(8, "little") + b"N.",  # FRAME past the end
        b"I99999999999999999999999999999999999999999999999999x\n.",
        b"S'unterminated\n.",
        b"",
        b".",
    ]


def mutants(seeds: list[bytes], rng: random.Random, count: int) -> Iterator[bytes]:
    """Seeded bit flips, truncations, opcode splices and segment repeats of `seeds`."""
    for _ in range(count):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            where = rng.randrange(len(data) + 1)
            kind = rng.randrange(4)
            if kind == 0 and data:
                data[min(where, len(data) - 1)] ^= 1 << rng.randrange(8)
            elif kind == 1:
                del data[where:]
            elif kind == 2:
                data[where:where] = rng.choice(OPCODE_BYTES) + rng.randbytes(rng.randrange(9))
            else:
                data[where:where] = data[where : where + rng.randrange(1, 16)] * rng.randrange(2, 5)
        yield bytes(data)


def json_mutants(rng: random.Random, count: int) -> Iterator[str]:
    """JSON texts with characters flipped, cut, repeated or spliced in; the decoder meets each
    pickled (as LiveCodeBench's private tests) and bare (as its public tests)."""
    texts = [json.dumps(TESTS), json.dumps([TESTS[0]] * 3), '[{"input": 1e999999, "output": []}]']
    specials = ['"', "\\", "[", "{", "]", "}", ",", ":", "\\u", "\\ud800", "1e99999", "NaN"]
    for _ in range(count):
        text = list(rng.choice(texts))
        for _ in range(rng.randint(1, 3)):
            where = rng.randrange(len(text) + 1)
            kind = rng.randrange(3)
            if kind == 0:
                del text[where:]
            elif kind == 1:
                text[where:where] = rng.choice(specials) * rng.randrange(1, 4)
            elif text:
                text[min(where, len(text) - 1)] = chr(rng.randrange(0x20, 0x3000))
        yield "".join(text)


def outer_mutants(valid: str, rng: random.Random, count: int) -> Iterator[object]:
    """Damage at the base64 and zlib layers, and fields that are not text at all."""
    yield from (None, 3, b"[]", ["x"], "", "   ", "[", "\ud800", "not base64!", "QUJD")
    for _ in range(count):
        raw = bytearray(base64.b64decode(valid))
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        yield base64.b64encode(bytes(raw[: rng.randrange(1, len(raw) + 1)])).decode()


def decode_or_refuse(raw: object) -> list[dict[str, str]] | None:
    """decode_tests' value, or None for a DatasetError naming the field; anything else fails."""
    try:
        return decode_tests(raw, what=WHAT)
    except DatasetError as exc:
        assert WHAT in str(exc)
        return None


@pytest.fixture
def registered_extension() -> Iterator[None]:
    """os.system registered as a copyreg extension, with its cache warm: EXT1/2/4 would fetch it
    without asking find_class."""
    copyreg.add_extension("os", "system", EXT_CODE)
    copyreg._extension_cache[EXT_CODE] = os.system  # type: ignore[attr-defined]
    try:
        yield
    finally:
        copyreg._extension_cache.pop(EXT_CODE, None)  # type: ignore[attr-defined]
        copyreg.remove_extension("os", "system", EXT_CODE)


# pickletools reads a mutant's protocol-0 string before its opcode is refused, and warns.
@pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")
def test_hostile_and_mutated_pickles_are_refused_and_run_nothing(
    tmp_path: Path, registered_extension: None
) -> None:
    marker = tmp_path / "ran"
    rng = random.Random(20261127)
    valid = [pickle.dumps(json.dumps(TESTS), protocol=p) for p in range(6)]
    seeds = valid + hostile(marker) + malformed()
    small = [seed for seed in seeds if len(seed) < 1_000]  # mutating the deep ones only costs time
    started = time.monotonic()
    decoded = refused = 0
    for pickled in [*seeds, *mutants(small, rng, 10_000)]:
        if decode_or_refuse(pack(pickled)) is None:
            refused += 1
        else:
            decoded += 1
    for raw in outer_mutants(pack(valid[4]), rng, 1_000):
        decode_or_refuse(raw)
    for text in json_mutants(rng, 2_000):
        decode_or_refuse(pack(pickle.dumps(text)))
        decode_or_refuse("[" + text)
    assert not marker.exists()
    # Every hostile and malformed seed is refused; the valid ones (and some mutants) decode.
    assert all(decode_or_refuse(pack(p)) is None for p in hostile(marker) + malformed())
    assert all(decode_or_refuse(pack(p)) == TESTS for p in valid)
    assert refused > 5_000 and decoded >= len(valid)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    "pickled, why",
    [
        (pickle.dumps(_System("true")), r"opcode STACK_GLOBAL at byte \d+ .*names posix\.system"),
        (b"cos\nsystem\n(S'true'\ntR.", r"opcode GLOBAL .*names os\.system"),
        (b"\x80\x02\x82\xe0X\x04\x00\x00\x00true\x85R.", r"opcode EXT1"),
        (b"\x80\x04]r\xf0\xff\xff\xff.", r"memo index 4294967280 at byte 3 skips ahead"),
        (b"\x80\x04(" + b"N" * MAX_OPCODES + b"l.", rf"more than {MAX_OPCODES:,} opcodes"),
        (b"\x80\x05" + b"]" * 9 + b"a" * 8 + b".", r"the pickle holds list, not JSON text"),
        (pickle.dumps("[" * 200_000), r"not JSON \(RecursionError"),
    ],
    ids=["reduce", "global", "ext1", "memo", "opcodes", "list", "deep-json"],
)
def test_a_refusal_says_why(pickled: bytes, why: str) -> None:
    with pytest.raises(DatasetError, match=rf"^{WHAT}.*{why}"):
        decode_tests(pack(pickled), what=WHAT)


def test_a_zip_bomb_stops_at_the_cap() -> None:
    # 1 GiB of zeros in under 5 MiB of zlib, inflated only up to the cap.
    deflater, zeros = zlib.compressobj(1), bytes(2**24)
    bomb = b"".join(deflater.compress(zeros) for _ in range(64)) + deflater.flush()
    assert len(bomb) < 5 * 2**20
    with pytest.raises(DatasetError, match=r"decompresses to more than the cap of 256 MiB"):
        decode_tests(base64.b64encode(bomb).decode(), what=WHAT)
    # Just under the cap decodes to the data (here not a pickle, so refused as one).
    under = base64.b64encode(zlib.compress(bytes(MAX_DECODED_BYTES))).decode()
    with pytest.raises(DatasetError, match="refused to unpickle"):
        decode_tests(under, what=WHAT)
