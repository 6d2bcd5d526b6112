"""A task file's `length_prior`: a published mean answer length, with its source, that prices
a task no run or pilot has measured, labelled as a prior; past runs take precedence, and a
run's fingerprint leaves it out."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpipe.catalog.configpath import config_dir
from evalpipe.catalog.preset import load_preset
from evalpipe.core.configio import as_config
from evalpipe.core.errors import ConfigError
from evalpipe.core.span import Span
from evalpipe.estimate.history import PastJob, TaskRecord, family
from evalpipe.estimate.workmodel import task_work
from evalpipe.tasks import load_task

PRIOR = 'length_prior: {tokens: 150, source: "a paper, Table 2"}'


def _gsm8k(tmp_path: Path, extra: str) -> Path:
    copy = tmp_path / "gsm8k.yaml"
    copy.write_text((Path(config_dir()) / "tasks" / "gsm8k.yaml").read_text() + extra + "\n")
    return copy


def test_a_length_prior_prices_an_unrun_task_and_says_where_it_comes_from(
    tmp_path: Path,
) -> None:
    preset = load_preset("llama3_3_70b")
    task = load_task(str(_gsm8k(tmp_path, PRIOR)))
    work = task_work(task, preset, limit=None, history=[], counter=None)
    assert work.generated_tokens == Span(75.0, 150.0, 225.0)
    assert work.sources[1] == (
        "length prior (not measured here): 150 tok mean answer, from a paper, Table 2"
    )
    assert not work.length_bound  # not priced at max_tokens: no `bound:` line
    # A past run of the preset measured the task: its lengths, not the prior.
    record = TaskRecord(task="gsm8k", samples=100, completions=100, prompt_tokens=50_000,
                        generated_tokens=30_000, longest=384, ranked=0)  # fmt: skip
    job = PastJob(path=Path("run"), preset=preset.name, family=family(preset.model),
                  gpu="h100-80gb", tp=1, pp=1, replicas=1, backend="vllm", attempts=1,
                  load_s=1.0, generate_s=1.0, score_s=0.0, wall_s=3.0, gpus=1, energy_j=None,
                  tasks=(record,))  # fmt: skip
    seen = task_work(task, preset, limit=None, history=[job], counter=None)
    assert seen.generated_tokens.mid == pytest.approx(300) and "past job" in seen.sources[1]


def test_a_length_prior_stays_out_of_the_runs_fingerprint(tmp_path: Path) -> None:
    plain = load_task(str(_gsm8k(tmp_path, "")))
    with_prior = load_task(str(_gsm8k(tmp_path, PRIOR)))
    assert with_prior.config.length_prior is not None
    assert as_config(with_prior.config) == as_config(plain.config)


@pytest.mark.parametrize(
    ("prior", "message"),
    [
        ("{tokens: 0, source: x}", "length_prior.tokens must be a positive whole number"),
        ('{tokens: 150, source: ""}', "length_prior.source must say where the mean is published"),
        ("{tokens: 150}", r"missing required key\(s\) source"),
    ],
)
def test_a_bad_length_prior_names_the_value_and_the_fix(
    tmp_path: Path, prior: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_task(str(_gsm8k(tmp_path, f"length_prior: {prior}")))


def _preset(tmp_path: Path, priors: str) -> Path:
    copy = tmp_path / "mymodel.yaml"
    text = (Path(config_dir()) / "presets" / "llama3_3_70b.yaml").read_text()
    copy.write_text(text + "\nlength_priors:\n" + priors)
    return copy


def test_a_presets_length_prior_for_the_task_comes_before_the_task_files(tmp_path: Path) -> None:
    card = '  - {task: gsm8k, tokens: 240, source: "the model card, Evaluation"}\n'
    preset = load_preset(str(_preset(tmp_path, card)))
    task = load_task(str(_gsm8k(tmp_path, PRIOR)))
    work = task_work(task, preset, limit=None, history=[], counter=None)
    assert work.generated_tokens.mid == 240
    assert work.sources[1].endswith("240 tok mean answer, from the model card, Evaluation")
    twice = card + '  - {task: gsm8k, tokens: 300, source: "elsewhere"}\n'
    with pytest.raises(ConfigError, match="length_priors names task 'gsm8k' twice"):
        load_preset(str(_preset(tmp_path, twice)))
