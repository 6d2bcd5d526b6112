"""lm-eval tasks marked unsafe_code: refused before lm-eval imports their modules unless
--allow-unsafe-code; with it, the model's programs their metric executes run in evalpipe's
sandbox, where the runner's environment and the network are out of reach."""

from __future__ import annotations

import json
import queue
import socket
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lmeval_support import mean_of, task_file, use_lm_eval, write_jsonl

from evalpipe.core.errors import ConfigError
from evalpipe.records.completion import Completion, Generation
from evalpipe.tasks.kindbase import LoadOptions
from evalpipe.tasks.kinds import load_refs

use_lm_eval()

SECRET = "EP_UNSAFE_SECRET"
MARKER = "EP_UNSAFE_MARKER"
# The task's own module: it notes its import, and its metric runs the completion as a program
# (as code metrics do) and reports what that program reached.
UTILS = f'''
import os

if os.environ.get("{MARKER}"):
    with open(os.environ["{MARKER}"], "a") as f:
        f.write("imported\\n")


def process_results(doc, results):
    found = {{}}
    try:
        exec(results[0], {{"found": found}})
    except Exception:
        pass
    return {{
        "ran": float(found.get("ran", 0)),
        "read_secret": float(found.get("secret") == doc["secret"]),
        "connected": float(found.get("connected", False)),
    }}
'''


def program(port: int) -> str:
    """What the 'model' writes: it reads the runner's secret and connects to a local port."""
    return textwrap.dedent(f"""\
        import os, socket
        found["ran"] = 1
        found["secret"] = os.environ.get("{SECRET}")
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
            found["connected"] = True
        except OSError:
            found["connected"] = False
        """)


@pytest.fixture
def unsafe_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ep_unsafe.yaml, whose unsafe_code comes from the file it includes."""
    monkeypatch.setenv(MARKER, str(tmp_path / "imported"))
    monkeypatch.setenv(SECRET, "s3cret")
    data = write_jsonl(tmp_path / "d.jsonl", [
        {"question": "Write a program.", "secret": "s3cret"},
        {"question": "Write another program.", "secret": "s3cret"}])  # fmt: skip
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "_unsafe_base.yaml").write_text("unsafe_code: true\n")
    path = task_file(tmp_path, "ep_unsafe", {"test": data}, output_type="generate_until",
                     doc_to_text="{{question}}", doc_to_target="{{secret}}",
                     generation_kwargs={"until": ["<END>"], "max_gen_toks": 200},
                     metric_list=mean_of("ran", "read_secret", "connected"))  # fmt: skip
    text = path.read_text().replace(
        "metadata:", "process_results: !function utils.process_results\nmetadata:"
    )
    path.write_text("include: _unsafe_base.yaml\n" + text)
    return path


@pytest.fixture
def listener() -> Iterator[tuple[int, queue.Queue[Any]]]:
    """A local port that accepts connections, and the connections it accepted."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: queue.Queue[Any] = queue.Queue()

    def accept() -> None:
        while True:
            try:
                accepted.put(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


def load(ref: str, **options: Any) -> list[Any]:
    return list(load_refs([ref], LoadOptions(**options))[0].tasks)


def test_refused_without_the_flag_before_its_module_is_imported(unsafe_task: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load(f"lm_eval:{unsafe_task}")
    message = str(refused.value)
    assert "'ep_unsafe' is marked unsafe_code" in message
    assert f"(in {unsafe_task})" in message
    assert "--allow-unsafe-code" in message
    assert not (unsafe_task.parent / "imported").exists()
    # The same task file is loaded (and its module imported) once allowed.
    load(f"lm_eval:{unsafe_task}", allow_unsafe_code=True)
    assert (unsafe_task.parent / "imported").read_text() == "imported\n"


def test_a_group_over_an_unsafe_task_is_refused_too(unsafe_task: Path) -> None:
    group = unsafe_task.parent / "ep_unsafe_group.yaml"
    group.write_text("group: ep_unsafe_group\ntask:\n  - ep_unsafe\nmetadata:\n  version: 1.0\n")
    with pytest.raises(ConfigError, match="'ep_unsafe' is marked unsafe_code"):
        load(f"lm_eval:{group}")
    assert not (unsafe_task.parent / "imported").exists()


def test_evaluate_takes_the_flag_by_its_name(unsafe_task: Path, tmp_path: Path) -> None:
    """`evalpipe.evaluate(..., allow_unsafe_code=True)`, as `evalpipe run --allow-unsafe-code`
    (tests/test_option_walk.py takes the flag from submit to the job's run)."""
    import evalpipe

    with pytest.raises(ConfigError, match="marked unsafe_code"):
        evalpipe.evaluate("tiny_random", [f"lm_eval:{unsafe_task}"], out=tmp_path / "refused",
                          backend="fake")  # fmt: skip
    assert not (unsafe_task.parent / "imported").exists()
    result = evalpipe.evaluate("tiny_random", [f"lm_eval:{unsafe_task}"], out=tmp_path / "run",
                               backend="fake", allow_unsafe_code=True)  # fmt: skip
    assert result.status == "complete"


def test_on_a_machine_without_namespaces_it_needs_the_weak_opt_in(
    unsafe_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lm-eval's code metrics are code tasks like the others (tests/test_sandbox_isolation.py):
    the weak fallback only with --sandbox weak, and the run records the level it scored under."""
    import evalpipe
    from evalpipe.core.errors import SandboxError
    from evalpipe.sandbox import pool
    from evalpipe.tasks.base import runs_code

    (task,) = load(f"lm_eval:{unsafe_task}", allow_unsafe_code=True)
    assert runs_code(task)  # so the run checks and records the sandbox's isolation
    pool.shutdown()
    monkeypatch.setattr(pool, "WORKER", Path(__file__).with_name("sandbox_no_namespaces.py"))
    try:
        with pytest.raises(SandboxError, match="--sandbox weak"):
            evalpipe.evaluate("tiny_random", [f"lm_eval:{unsafe_task}"], out=tmp_path / "no",
                              backend="fake", allow_unsafe_code=True)  # fmt: skip
        assert not (tmp_path / "no").exists()
    finally:
        monkeypatch.undo()
        pool.shutdown()
        pool.require_isolation("weak")  # whatever this machine gives, as the other tests expect


def test_allowed_its_programs_run_in_the_sandbox(
    unsafe_task: Path, listener: tuple[int, queue.Queue[Any]]
) -> None:
    """The program reads the runner's secret and connects to a listening local port where it
    runs here (the control); scored through evalpipe, it ran but reached neither."""
    port, accepted = listener
    code = program(port)
    (task,) = load(f"lm_eval:{unsafe_task}", allow_unsafe_code=True)
    namespace: dict[str, Any] = {"found": {}}
    exec(code, namespace)  # the control, in this process: the program reaches both
    assert namespace["found"]["secret"] == "s3cret" and namespace["found"]["connected"]
    accepted.get(timeout=5)
    samples = task.samples()
    completions = [
        Completion(id=s.id, generation=Generation(texts=(code,), prompt_tokens=0,
                                                  completion_tokens=(0,)))
        for s in samples
    ]  # fmt: skip
    scored = task.score_responses(list(zip(samples, completions, strict=True)))
    for result in scored:
        assert result.scores == {"ran,none": 1.0, "read_secret,none": 0.0, "connected,none": 0.0,
                                 "sandbox_failed": 0.0}  # fmt: skip
        assert result.extracted == (code,)
    with pytest.raises(queue.Empty):  # no connection came from the sandbox
        accepted.get(timeout=0.5)


def test_a_run_on_the_fake_engine_scores_it_in_the_sandbox(
    unsafe_task: Path, listener: tuple[int, queue.Queue[Any]], tmp_path: Path
) -> None:
    from evalpipe.catalog.preset import load_preset
    from evalpipe.engine.fake import FakeEngine
    from evalpipe.run.runner import RunOptions, run_evaluation

    port, accepted = listener
    preset = load_preset("tiny_random")
    tasks = load(f"lm_eval:{unsafe_task}", allow_unsafe_code=True, preset=preset,
                 backend="fake")  # fmt: skip
    script = {"program": program(port) + "<END>"}
    out = tmp_path / "run"
    run_evaluation(lambda s: FakeEngine(preset, s, script=script), tasks, out, preset=preset,
                   options=RunOptions(backend="fake"))  # fmt: skip
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["scores"] for r in rows] == [
        {"ran,none": 1.0, "read_secret,none": 0.0, "connected,none": 0.0, "sandbox_failed": 0.0}
    ] * 2
    results = json.loads((out / "lm_eval_results.json").read_text())["results"]["ep_unsafe"]
    assert (results["ran,none"], results["read_secret,none"]) == (1.0, 0.0)
    assert accepted.empty()


def test_a_program_that_ends_the_metrics_process_fails_its_document_only(
    unsafe_task: Path, listener: tuple[int, queue.Queue[Any]]
) -> None:
    """A completion that exits the metric's own process (it runs in it, as lm-eval runs it) ends
    its batch: the documents are scored again one at a time, and only that one fails."""
    (task,) = load(f"lm_eval:{unsafe_task}", allow_unsafe_code=True)
    samples = task.samples()
    codes = ["import os\nos._exit(3)\n", program(listener[0])]
    completions = [
        Completion(id=s.id, generation=Generation(texts=(code,), prompt_tokens=0,
                                                  completion_tokens=(0,)))
        for s, code in zip(samples, codes, strict=True)
    ]  # fmt: skip
    failed, scored = task.score_responses(list(zip(samples, completions, strict=True)))
    assert failed.scores == {"ran,none": 0.0, "read_secret,none": 0.0, "connected,none": 0.0,
                             "sandbox_failed": 1.0}  # fmt: skip
    assert scored.scores["ran,none"] == 1.0 and scored.scores["sandbox_failed"] == 0.0


def test_tasks_show_takes_the_flag_too(
    unsafe_task: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evalpipe.cli import main
    from evalpipe.core import exitcodes

    reference = f"lm_eval:{unsafe_task}"
    assert main(["tasks", "show", reference, "--limit", "1"]) != exitcodes.OK
    assert "--allow-unsafe-code" in capsys.readouterr().err
    assert main(["tasks", "show", reference, "--limit", "1", "--allow-unsafe-code"]) == 0
    assert json.loads(capsys.readouterr().out)["prompt"] == "Write a program."


def test_a_task_that_does_not_load_in_the_sandbox_is_refused_as_the_run_starts(
    unsafe_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its metric needs a module only the runner can import (the sandbox has a /tmp of its
    own): the load says so, before any generation."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "ep_runner_only.py").write_text("BONUS = 0.0\n")
    monkeypatch.syspath_prepend(str(lib))
    utils = unsafe_task.parent / "utils.py"
    utils.write_text(
        "import ep_runner_only\n"
        + UTILS.replace('"ran": float(', '"ran": ep_runner_only.BONUS + float(')
    )
    with pytest.raises(
        ConfigError, match=r"'ep_unsafe' \(unsafe_code\) does not load in the sandbox"
    ):
        load(f"lm_eval:{unsafe_task}", allow_unsafe_code=True)


def test_a_code_eval_metric_is_refused_without_the_flag_even_unmarked(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "def f():", "test": "assert f()"}])
    task_file(tmp_path, "ep_code_eval", {"test": data}, output_type="generate_until",
              doc_to_text="{{prompt}}", doc_to_target="{{test}}",
              metric_list=[{"metric": "code_eval", "hf_evaluate": True, "k": [1],
                            "aggregation": "mean", "higher_is_better": True}])  # fmt: skip
    with pytest.raises(ConfigError, match="'ep_code_eval' is marked unsafe_code or scores with"):
        load(f"lm_eval:{tmp_path}/ep_code_eval.yaml")


def test_lm_evals_humaneval_is_refused_before_its_module_runs() -> None:
    """Its module loads and runs HF evaluate's code_eval as it is imported."""
    import sys

    with pytest.raises(ConfigError, match=r"'humaneval' is marked unsafe_code.*humaneval\.yaml"):
        load("lm_eval:humaneval")
    assert "lm_eval.tasks.humaneval.utils" not in sys.modules


def test_a_task_class_that_says_unsafe_code_is_refused_once_built() -> None:
    from types import SimpleNamespace

    from evalpipe.tasks.lmeval.unsafe import refuse_loaded

    config = SimpleNamespace(metric_list=[{"metric": "acc"}])
    refuse_loaded([SimpleNamespace(task_name="ep_safe", UNSAFE_CODE=False, config=config)])
    with pytest.raises(ConfigError, match=r"'ep_class' is marked .* its lm-eval task class"):
        refuse_loaded([SimpleNamespace(task_name="ep_class", UNSAFE_CODE=True, config=config)])
