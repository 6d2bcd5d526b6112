"""Task kinds: a reference parsed once (bad ones named with the valid kinds), every kind listed
and shown, --max-tokens reaching MT-Bench, a judged task's context fitted, and a k beyond n
said once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.catalog.budgets import fit_context
from evalpipe.catalog.preset import load_preset
from evalpipe.catalog.taskrefs import KINDS, AskGiven, TaskRef, named_asks
from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.manifest import read_manifest
from evalpipe.tasks.kindbase import LoadOptions, TaskKind
from evalpipe.tasks.kinds import get_kind, load_refs, load_selection

# A small copy of arena-hard-auto's layout (tests/test_arena_hard.py).
ARENA_HARD_DATA = Path(__file__).parent / "fixtures" / "arena_hard"


@pytest.mark.parametrize(
    ("text", "kind", "name"),
    [
        ("arithmetic", "file", "arithmetic"),
        ("tasks/x.yaml", "file", "tasks/x.yaml"),
        ("suite:reasoning-2026", "suite", "reasoning-2026"),
        ("lm_eval:gsm8k", "lm_eval", "gsm8k"),
        ("judge:my/file.yaml", "judge", "my/file.yaml"),
        ("mt_bench", "mt_bench", "mt_bench"),
        ("arena_hard", "arena_hard", "arena_hard"),
    ],
)
def test_a_reference_is_parsed_into_its_kind(text: str, kind: str, name: str) -> None:
    ref = TaskRef.parse(text)
    assert (ref.kind, ref.name, str(ref)) == (kind, name, text)


@pytest.mark.parametrize(
    ("text", "why"),
    [("lmeval:gsm8k", "names no task kind 'lmeval'"), ("judge:", "names nothing after judge:"),
     ("mt_bench:x", "names no task kind 'mt_bench'"), ("", "is empty")],
)  # fmt: skip
def test_a_bad_reference_names_the_value_and_the_valid_kinds(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as error:
        TaskRef.parse(text)
    assert repr(text) in str(error.value) and why in str(error.value)
    assert "lm_eval:NAME, judge:FILE, mt_bench, arena_hard" in str(error.value)


def test_every_loadable_kind_is_registered_with_its_loader() -> None:
    for name, spec in KINDS.items():
        if spec.loader is not None:
            kind = get_kind(name)
            assert isinstance(kind, TaskKind) and kind.name == name


def test_tasks_list_shows_every_kind_and_what_it_needs(capsys: pytest.CaptureFixture) -> None:
    assert main(["tasks", "list"]) == exitcodes.OK
    listed = capsys.readouterr().out
    for written in ("NAME or PATH.yaml", "lm_eval:NAME", "judge:FILE", "mt_bench", "arena_hard"):
        assert written in listed
    assert "suite:NAME" in listed and "package lm-eval" in listed and "a judge" in listed


def _judged_file(tmp_path: Path, max_tokens: int = 900) -> Path:
    (tmp_path / "rows.jsonl").write_text(
        '{"id": "a", "question": "Name a prime.", "turns": ["And another?"]}\n'
    )
    path = tmp_path / "primes.yaml"
    path.write_text(
        f"name: primes\ndata: rows.jsonl\nsampling: {{max_tokens: {max_tokens}}}\n"
        "judge: {system_prompt: Grade., template: '{question} {answer}'}\n"
    )
    return path


@pytest.mark.parametrize("reference", ["arithmetic", "mt_bench", "suite", "judge", "arena_hard"])
def test_tasks_show_works_for_each_kind(
    reference: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    if reference == "judge":
        reference = f"judge:{_judged_file(tmp_path)}"
    if reference == "suite":
        (tmp_path / "mine.yaml").write_text("tasks: [{task: arithmetic}]\n")
        reference = f"suite:{tmp_path / 'mine.yaml'}"
    data = ["--judge-data", str(ARENA_HARD_DATA)] if reference == "arena_hard" else []
    assert main(["tasks", "show", reference, "--limit", "1", *data]) == exitcodes.OK
    shown = capsys.readouterr().out
    assert shown.count("\n") == 1 and '"prompt"' in shown


def test_max_tokens_reaches_mt_bench(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = main(["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "mt_bench",
                 "--limit", "1", "--max-tokens", "16", "--out", str(out)])  # fmt: skip
    assert code == exitcodes.OK
    manifest = read_manifest(RunDir(out))
    assert manifest is not None
    budgets = {name: d["sampling"]["max_tokens"] for name, d in manifest.config.definitions.items()}
    assert len(budgets) == 8 and set(budgets.values()) == {16}


def test_a_judged_task_gets_its_context_fitted(tmp_path: Path) -> None:
    preset = load_preset("tiny_random")  # a short context: its second turn must fit too
    path = _judged_file(tmp_path, max_tokens=4 * preset.architecture.max_position_embeddings)
    chosen = load_selection([f"judge:{path}"], LoadOptions(preset=preset))
    (task,) = chosen.tasks
    # Two answers and the prompts within the model's limit: each answer gets under half of it.
    assert chosen.context.max_model_len == preset.architecture.max_position_embeddings
    assert 2 * task.sampling.max_tokens < chosen.context.max_model_len
    assert any("primes: budget capped" in note for note in chosen.notes)
    # `render` sizes it the same from the files alone.
    (ask,) = named_asks([f"judge:{path}"], AskGiven())
    assert (ask.turns, ask.name) == (2, "primes")


def test_a_k_beyond_n_is_said_once_naming_the_task(tmp_path: Path) -> None:
    path = tmp_path / "sums.yaml"
    path.write_text(
        "category: math\nsource: {uri: 'generated:arithmetic', size: 4}\n"
        "prompt: {template: '{{ question }}'}\nsampling: {temperature: 0.7, n: 4}\n"
        "scorer: {kind: math, k: [2, 16]}\n"
    )
    chosen = load_selection([str(path)], LoadOptions(preset=load_preset("tiny_random")))
    said = [note for note in chosen.notes if "k 16 > n 4" in note]
    assert len(said) == 1 and said[0].startswith("sums:")


def test_render_sizes_every_kind_without_loading_task_code(tmp_path: Path) -> None:
    probe = (
        "import sys\nfrom evalpipe.cli import main\n"
        "main(['render', '--preset', 'tiny_random', '--cluster', 'local', '--tasks',\n"
        "      'mt_bench,arena_hard,lm_eval:gsm8k,arithmetic', '--max-tokens', '64'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('evalpipe.tasks')))\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in (done.stdout + done.stderr).splitlines()]
    rows = {words[0]: words[1:] for words in lines if words}
    assert rows["mt_bench"][:2] == ["1", "64"] and rows["arena_hard"][:2] == ["1", "64"]
    assert rows["lm_eval:gsm8k"] == ["-", "-", "lm-eval's", "metrics", "-"]  # sized as it loads
    assert done.stdout.rstrip().endswith("[]")  # no module of evalpipe.tasks was imported


def test_two_kinds_naming_one_task_are_refused(tmp_path: Path) -> None:
    judged = _judged_file(tmp_path)
    judged.write_text(judged.read_text().replace("name: primes", "name: arithmetic"))
    with pytest.raises(ConfigError, match="'arithmetic' comes from both file and judge"):
        load_refs(["arithmetic", f"judge:{judged}"], LoadOptions())


def test_render_and_the_run_size_mt_bench_alike() -> None:
    """The catalog's bound on MT-Bench's prompts is its longest conversation, so the context
    `render` plans is the one the run fits its two turns to."""
    preset = load_preset("smollm2_135m")  # a context to raise: 2,048 of 8,192 positions
    planned = fit_context(preset, named_asks(["mt_bench"], AskGiven()), None)
    run = load_selection(["mt_bench"], LoadOptions(preset=preset)).context
    assert planned.max_model_len == run.max_model_len > preset.max_model_len
    assert set(run.budgets.values()) == {1024}  # no answer cut to fit


def test_a_kind_keeps_a_results_file_only_when_its_tasks_ran(tmp_path: Path) -> None:
    """Every kind is asked when a run completes; task files keep no results document of their
    own, so none is written. A kind's file is named after it: lm-eval's stays
    lm_eval_results.json, as in run directories written before kinds declared theirs."""
    out = tmp_path / "run"
    assert main(["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic",
                 "--limit", "2", "--out", str(out)]) == exitcodes.OK  # fmt: skip
    manifest = read_manifest(RunDir(out))
    assert manifest is not None and manifest.status == "complete"
    assert not list(out.glob("*_results.json"))
    assert RunDir(out).kind_results("lm_eval").name == "lm_eval_results.json"
