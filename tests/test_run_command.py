"""`evalpipe run` command-line handling that needs no task registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe import exitcodes
from evalpipe.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_resume_needs_an_existing_run(tmp_path: Path, capsys) -> None:
    assert main(["run", "--preset", "tiny_random", "--backend", "fake", "--resume"]) == 1
    assert "--resume needs --out" in capsys.readouterr().err
    code = main(["run", "--preset", "tiny_random", "--resume", "--out", str(tmp_path / "nope")])
    assert code == exitcodes.ERROR
    assert "there is no run to resume" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shard", "2/2"], "index in 0..count-1"),
        (["--shard", "half"], "must look like i/N"),
        (["--limit", "0"], "expected a positive integer"),
        (["--backend", "tgi"], "invalid choice"),
    ],
)
def test_bad_options_are_usage_errors(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--preset", "tiny_random", *argv])
    assert exit_.value.code == exitcodes.USAGE
    assert message in capsys.readouterr().err


def test_help_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys\n"
        "from evalpipe.cli import main\n"
        "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = {'vllm', 'torch', 'pandas', 'pynvml', 'psutil'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
