"""Task files: the strict schema refuses mistakes with messages that say what to change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from evalpipe.core.errors import ConfigError
from evalpipe.tasks import load_task
from evalpipe.tasks.config import load_task_config

VALID: dict[str, Any] = {
    "category": "math",
    "source": {"uri": "generated:arithmetic", "size": 5},
    "prompt": {"template": "{{ question }}"},
    "scorer": {"kind": "math"},
}


def _write(tmp_path: Path, data: dict[str, Any], name: str = "mytask") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _with(**changes: Any) -> dict[str, Any]:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in VALID.items()}
    for dotted, value in changes.items():
        keys = dotted.split("__")
        target = data
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return data


def _error(tmp_path: Path, data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        load_task_config(_write(tmp_path, data))
    return str(err.value)


def test_a_valid_file_loads_with_its_stem_as_name(tmp_path: Path) -> None:
    config = load_task_config(_write(tmp_path, VALID))
    assert config.name == "mytask"
    assert config.sampling.max_tokens == 256 and config.sampling.n == 1
    assert config.scorer.extractor_name == "answer"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"promt": {"template": "x"}}, "unknown key 'promt'. Did you mean 'prompt'?"),
        ({"sampling": {"max_token": 5}}, "unknown key 'max_token'. Did you mean 'max_tokens'?"),
        ({"scorer__extracter": "boxed"}, "unknown key 'extracter'. Did you mean 'extractor'?"),
        ({"source__splt": "train"}, "unknown key 'splt'. Did you mean 'split'?"),
        ({"source__uri": "hub:openai/gsm8k"}, "SCHEME one of hf, jsonl, parquet"),
        ({"source__uri": "hf:gsm8k"}, "must name ORG/NAME"),
        ({"source__uri": "generated:arithmatic"}, "unknown generated set 'arithmatic'"),
        ({"scorer__kind": "exact"}, "scorer kind 'exact' is not one of multiple_choice, math"),
        ({"scorer__extractor": "letter"}, "extractor 'letter' does not fit scorer 'math'"),
        (
            {"scorer": {"kind": "multiple_choice", "k": [1, 5]}},
            "k applies to code and math scorers only",
        ),
        ({"scorer__harness": "mbpp"}, "harness applies to code scorers only"),
        ({"sampling": {"top_k": -2}}, "top_k must be 0 (off) or a positive integer"),
        ({"sampling": {"min_p": 1.5}}, "min_p must be in [0, 1] (0: off)"),
        ({"scorer__method": "logprobs"}, "multiple_choice scorers only, not 'math'"),
        ({"scorer__method": "loglik"}, "scorer method 'loglik' is not one of generate, logprobs"),
        ({"scorer__continuation": "text"}, "continuation applies to method: logprobs only"),
        ({"category": "Math Tasks"}, "category 'Math Tasks' must be lowercase"),
        ({"sampling": {"n": 4}}, "temperature 0 gives 4 identical completions"),
        ({"sampling": {"max_tokens": 0}}, "max_tokens must be a positive integer"),
        ({"sampling": {"top_p": 1.5}}, "top_p must be in (0, 1]"),
        ({"sampling": {"stop": "\n"}}, "stop must be a list of non-empty strings"),
        ({"prompt__shots": 3}, "need both answer and shots_split"),
        (
            {"prompt__shots": 2, "prompt__answer": "{{ answer }}", "prompt__shots_split": "test"},
            "shots_split 'test' is the evaluated split",
        ),
    ],
)
def test_mistakes_are_rejected_with_a_fix(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    message = _error(tmp_path, _with(**changes))
    assert expected in message
    assert str(tmp_path / "mytask.yaml") in message  # the file is named


def test_code_scorer_needs_a_harness_and_k_within_n(tmp_path: Path) -> None:
    code = {"kind": "code"}
    assert "need harness one of humaneval, mbpp" in _error(tmp_path, _with(scorer=code))
    too_big = _with(scorer={"kind": "code", "harness": "humaneval", "k": [1, 10]})
    too_big["sampling"] = {"n": 5, "temperature": 0.8}
    assert "pass@k needs k <= sampling.n (5); got k = [10]" in _error(tmp_path, too_big)


def test_logprobs_method_is_for_one_answer_per_sample_and_known_continuations(
    tmp_path: Path,
) -> None:
    mc = _with(
        category="reasoning",
        source={"uri": "generated:ordering", "size": 5},
        scorer={"kind": "multiple_choice", "method": "logprobs"},
    )
    assert load_task_config(_write(tmp_path, mc)).scorer.continuation is None  # letters
    sampled = dict(mc, sampling={"n": 4, "temperature": 0.8})
    assert "sampling.n = 4 with scorer method logprobs" in _error(tmp_path, sampled)
    unknown = dict(mc, scorer={**mc["scorer"], "continuation": "word"})
    assert "continuation 'word' is not one of letter, text" in _error(tmp_path, unknown)


def test_missing_required_key_is_named(tmp_path: Path) -> None:
    data = dict(VALID)
    del data["scorer"]
    assert "missing required key(s) scorer" in _error(tmp_path, data)


def test_template_syntax_and_undefined_variables_are_reported(tmp_path: Path) -> None:
    broken = _write(tmp_path, _with(prompt={"template": "{{ question "}), "broken")
    with pytest.raises(ConfigError, match=r"prompt\.template is not a valid Jinja template"):
        load_task(str(broken))
    undefined = load_task(str(_write(tmp_path, _with(prompt={"template": "{{ questoin }}"}))))
    with pytest.raises(ConfigError) as err:
        undefined.samples(limit=1)
    assert "'questoin' is undefined" in str(err.value)
    assert "Available: answer, id, kind, question" in str(err.value)
