"""Longest-first admission from past runs' lengths, and the batch occupancy every run records."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from runner_support import ToyTask, preset

from evalpipe.cli import main
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError
from evalpipe.engine.fake import FakeEngine
from evalpipe.engine.protocol import EngineSettings, Room
from evalpipe.estimate.lengths import LengthModel, PastLengths, load_lengths
from evalpipe.records.sampling import SamplingSettings
from evalpipe.run.admission import admission_order
from evalpipe.run.replicas import ReplicaPool
from evalpipe.run.runner import RunOptions, run_evaluation
from evalpipe.run.stream import Item
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.occupancy import Occupancy
from evalpipe.rundir.samplelog import read_json
from evalpipe.rundir.summary import Summary, read_summary
from evalpipe.rundir.summarytext import format_summary

LONG = " ".join(["word"] * 60)  # 60 decoding steps on the token-stepped fake engine
TASK = ToyTask(name="story", category="writing", size=24)
# The last three questions get long answers: in the given order they run last, nearly alone.
SCRIPT = {f"Question {i} of story:": LONG for i in (21, 22, 23)}


def past(run: str, preset_name: str, lengths: dict[str, float], task: str = "t") -> PastLengths:
    return PastLengths(run=run, preset=preset_name, backend="vllm", tasks={task: lengths})


def test_a_sample_is_predicted_from_its_own_past_lengths_scaled_between_presets() -> None:
    runs = [
        past("a", "small", {"s1": 100, "s2": 300}),  # small's mean on t: 200
        past("b", "big", {"s1": 50, "s3": 150}),  # big's mean on t: 100, half of small's
    ]
    model = LengthModel(runs, "small")
    s1 = model.predict("t", "s1", max_tokens=999)
    assert (s1.basis, s1.tokens) == ("sample", 100.0)  # (100 + 50 × 2) / 2
    assert model.predict("t", "s3", 999).tokens == 300.0  # big's 150, in small's terms
    unseen = model.predict("t", "s9", 999)
    assert (unseen.basis, unseen.tokens) == ("task", 200.0)  # small's own mean on t
    assert model.predict("other", "s1", 999).basis == "max_tokens"
    # A preset with no run of its own takes other presets' lengths unscaled.
    assert LengthModel(runs, "new").predict("t", "s3", 999).tokens == 150.0


def test_longest_first_sorts_across_tasks_by_prediction_then_prompt_length() -> None:
    runs = [past("a", "p", {"story-0": 5, "story-1": 80, "story-2": 5}, task="story")]
    poems = ToyTask(name="poem", category="writing", size=2)
    stories = [s for s in TASK.samples() if s.id in ("story-0", "story-1", "story-2", "story-3",
                                                     "story-10")]  # fmt: skip
    given = [Item(task=TASK, sample=s) for s in stories]
    given += [Item(task=poems, sample=s) for s in poems.samples()]
    order, record = admission_order(given, LengthModel(runs, "p"), None, deterministic=False)
    # The poems have no past at all: their max_tokens (256) puts them first. story-3 and
    # story-10 have none of their own: the task's mean (30), the longer prompt first. 0 and 2
    # tie on both, and keep their order.
    assert [i.sample.id for i in order] == [
        "poem-0", "poem-1", "story-1", "story-10", "story-3", "story-0", "story-2",
    ]  # fmt: skip
    assert record["policy"] == "longest-first" and record["requested"] == "auto"
    assert record["predicted_by"] == {"sample": 3, "task": 2, "max_tokens": 2}
    assert record["head"][2] == {"task": "story", "sample_id": "story-1", "predicted_tokens": 80.0}
    # No past lengths, or a deterministic run: the given order unless asked otherwise.
    for model, deterministic in ((LengthModel([], "p"), False), (LengthModel(runs, "p"), True)):
        order, record = admission_order(given, model, None, deterministic=deterministic)
        assert order == given and record["policy"] == "given"
    given = given[:4]
    with pytest.raises(ConfigError, match="admission 'shortest' is not one of given, longest"):
        RunOptions(backend="fake", admission="shortest")  # type: ignore[arg-type]


def test_longest_first_records_whether_the_longest_samples_fit_the_kv_cache() -> None:
    # story-1's past run recorded 80 completion and 13 prompt tokens; story-0 and story-2 have
    # no recorded prompt, so their 36-character prompts count as 9 tokens (4 characters each).
    runs = [
        PastLengths(
            run="a",
            preset="p",
            backend="vllm",
            tasks={"story": {"story-0": 5, "story-1": 80, "story-2": 30}},
            prompts={"story": {"story-1": 13}},
        )
    ]
    model = LengthModel(runs, "p")
    assert (model.prompt_tokens("story", "story-1"), model.prompt_tokens("story", "story-0")) == (
        13,
        None,
    )
    items = [Item(task=TASK, sample=s) for s in TASK.samples()[:3]]
    # Two slots of blocks of 8: story-1 needs 13 + 80 = 93 tokens, 12 blocks (96); story-2
    # 9 + 30 = 39, 5 blocks (40); 136 tokens in all.
    for kv_tokens, fits in ((136, True), (135, False)):
        _, record = admission_order(
            items,
            model,
            None,
            deterministic=False,
            room=Room(slots=2, kv_tokens=kv_tokens, block=8),
        )
        assert record["cache"] == {
            "slots": 2,
            "kv_tokens": kv_tokens,
            "block": 8,
            "longest_need_tokens": 136,
            "fits": fits,
        }
    # n sequences each hold the prompt and a completion; the given order checks nothing.
    sampled = ToyTask(name="story", category="writing", size=3, sampling=SamplingSettings(n=4))
    items = [Item(task=sampled, sample=s) for s in sampled.samples()]
    _, record = admission_order(
        items, model, None, deterministic=False, room=Room(slots=6, kv_tokens=10**6, block=8)
    )
    assert record["cache"]["longest_need_tokens"] == 4 * 96 + 2 * 40
    _, record = admission_order(
        items, model, "given", deterministic=False, room=Room(slots=6, kv_tokens=1)
    )
    assert record["cache"] is None


def test_the_occupancy_record_splits_steps_at_half_the_slots() -> None:
    occupancy = Occupancy()
    occupancy.add(2.0, busy=8, total=8)
    occupancy.add(1.0, busy=4, total=8)  # half busy is not the tail
    occupancy.add(1.0, busy=3, total=8, preempted=2)
    assert occupancy.tail_share == 0.25
    assert occupancy.preemptions == 2
    assert (occupancy.tail_tokens_per_s, occupancy.rest_tokens_per_s) == (3.0, 4.0)
    assert Occupancy.from_dict(occupancy.to_dict()) == occupancy
    assert Occupancy().summary() is None
    # Replicas in other processes cannot say: the run's summary then has no occupancy.
    assert ReplicaPool([]).slots() is None


def test_replicas_room_is_their_slots_and_caches_together() -> None:
    one, two = Room(slots=8, kv_tokens=1024, block=16), Room(slots=4, kv_tokens=512, block=16)
    replicas = [SimpleNamespace(room=one), SimpleNamespace(room=two)]
    assert ReplicaPool(replicas).room() == Room(slots=12, kv_tokens=1536, block=16)  # type: ignore[arg-type]
    replicas.append(SimpleNamespace(room=None))  # an engine that cannot tell
    assert ReplicaPool(replicas).room() is None  # type: ignore[arg-type]
    assert ReplicaPool([]).room() is None


def _run(
    out: Path, admission: str | None, history: list[PastLengths], kv_tokens: int | None = None
) -> FakeEngine:
    engine = FakeEngine(
        preset(),
        EngineSettings(),
        script=SCRIPT,
        max_num_seqs=8,
        token_s=0.002,
        kv_tokens=kv_tokens,
    )
    run_evaluation(
        lambda settings: engine,
        [TASK],
        out,
        preset=preset(),
        options=RunOptions(backend="fake", admission=admission),  # type: ignore[arg-type]
        past=history,
    )
    return engine


def _samples(out: Path) -> dict[str, list[str]]:
    lines = (out / "samples.jsonl").read_text().splitlines()
    return {r["sample_id"]: r["completions"] for r in map(json.loads, lines)}


def test_longest_first_from_a_past_run_shortens_the_tail_and_changes_no_result(
    tmp_path: Path,
) -> None:
    given = _run(tmp_path / "results" / "first", "given", [])
    summary = read_summary(RunDir(tmp_path / "results" / "first"))
    assert summary is not None and summary.occupancy is not None
    # Two rounds of 8 short answers (4 words each), then the last 8 with the three long ones,
    # which go on alone in 3 of the 8 slots for 56 more steps.
    assert given._steps == 8 + 60
    assert summary.occupancy.tail_share is not None and summary.occupancy.tail_share > 0.7

    history = load_lengths([tmp_path / "results"], exclude=tmp_path / "results" / "second")
    assert [h.run for h in history] == [str(tmp_path / "results" / "first")]
    second = tmp_path / "results" / "second"
    longest = _run(second, None, history)
    assert longest._steps == 60  # the short answers run beside the long ones
    assert _samples(second) == _samples(tmp_path / "results" / "first")
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["admission"]["policy"] == "longest-first"
    assert manifest["admission"]["predicted_by"]["sample"] == 24
    assert [h["sample_id"] for h in manifest["admission"]["head"][:3]] == [
        "story-21", "story-22", "story-23",
    ]  # fmt: skip
    assert manifest["occupancy"]["slots"] == 8
    text = format_summary(read_summary(RunDir(second)) or Summary())
    assert "of generation with < half of 8 sequence slots busy" in text
    assert "; 0 preemptions (KV cache full)" in text  # the fake engine holds no cache

    from evalpipe.reports import aggregate, loading, tables

    table = aggregate.run_table(loading.load_runs([tmp_path / "results" / "first", second]))
    shown = tables.markdown(tables.occupancy(table))
    assert "Batch occupancy (generation)" in shown
    assert "| rest tok/s | preemptions |" in shown
    assert table.set_index("run_id").loc["second", "preemptions"] == 0
    first_share = table.set_index("run_id").loc["first", "tail_share"]
    assert first_share == pytest.approx(summary.occupancy.tail_share, abs=1e-3)


def test_a_run_warns_when_its_longest_samples_outgrow_the_kv_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _run(tmp_path / "results" / "first", "given", [])
    history = load_lengths([tmp_path / "results"])
    prompt = next(i for i in TASK.samples() if i.id == "story-23").prompt
    assert history[0].prompts["story"]["story-23"] == len(prompt.split())  # the fake's tokens
    for kv_tokens, fits in ((100, False), (10**6, True)):
        caplog.clear()
        out = tmp_path / f"kv{kv_tokens}"
        with caplog.at_level(logging.WARNING, logger="evalpipe.run.runner"):
            _run(out, None, history, kv_tokens=kv_tokens)
        cache = json.loads((out / "manifest.json").read_text())["admission"]["cache"]
        # The three long answers (60 words) and five short ones (4) fill the 8 slots.
        assert (cache["slots"], cache["kv_tokens"], cache["fits"]) == (8, kv_tokens, fits)
        assert cache["longest_need_tokens"] == 3 * (60 + 9) + 5 * (4 + 9)
        warned = "Longest-first admission: the 8 longest predicted sequences need about 272"
        assert (warned in caplog.text) is not fits
    # An engine that cannot tell its cache (the default): nothing to check.
    _run(tmp_path / "unknown", None, history)
    manifest = json.loads((tmp_path / "unknown" / "manifest.json").read_text())
    assert manifest["admission"]["policy"] == "longest-first"
    assert manifest["admission"]["cache"] is None


def test_the_command_line_predicts_from_past_runs_in_the_results_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--preset", "tiny_random", "--backend", "fake", "--tasks", "arithmetic",
            "--limit", "4", "--out"]  # fmt: skip
    assert main([*argv, "results/a"]) == exitcodes.OK
    assert read_json(Path("results/a/manifest.json"))["admission"]["policy"] == "given"
    assert main([*argv, "results/b"]) == exitcodes.OK
    admission = read_json(Path("results/b/manifest.json"))["admission"]
    assert admission["policy"] == "longest-first"
    assert admission["sources"] == [str((tmp_path / "results" / "a").resolve())]
    assert admission["predicted_by"]["sample"] == 4
    assert main([*argv, "results/c", "--admission", "given"]) == exitcodes.OK
    admission = read_json(Path("results/c/manifest.json"))["admission"]
    assert (admission["policy"], admission["requested"], admission["sources"]) == (
        "given", "given", [],
    )  # fmt: skip
