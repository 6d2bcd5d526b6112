"""Task-file prompt templates render in Jinja's sandbox: a template that reaches for Python is a
ConfigError naming the task file, and every shipped task's prompts are the same texts as before."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2
import pytest
from jinja2 import meta

from evalpipe.catalog.configpath import names
from evalpipe.core.errors import ConfigError
from evalpipe.tasks import load_task
from evalpipe.tasks.config import PromptConfig
from evalpipe.tasks.packaged import package_constant
from evalpipe.tasks.prompts import PromptBuilder

SHIPPED = names("tasks")
# Values for every variable a shipped template reads, with text Jinja or HTML would mangle.
RECORD = {
    "question": "What is {{ 1 + 1 }} & <b>2</b>?\n",
    "question_content": "Read N; print N's digits' sum. 'quoted' \"twice\"",
    "choices": ["4", "{% raw %}", "a\nb", "δ"],
    "letters": ["A", "B", "C", "D"],
    "prompt": "def f(x):\n    '''Return x.'''\n",
    "tests": ["assert f(1) == 1", "assert f(2) == 2"],
    "subject": "high_school_physics",
    "category": "law",
    "cot_content": "A: Let's think step by step. It is 4. The answer is (A).",
    "answer": "#### 4",
    "answer_letter": "A",
}
STARTERS = ["", "class Solution:\n    def f(self) -> int:\n"]


def plain_render(source: str, record: dict[str, object]) -> str:
    """The template rendered as task files were before the sandbox: a plain environment."""
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["package_constant"] = package_constant
    return env.from_string(source).render(record)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_prompts_render_as_they_did_before_the_sandbox(name: str) -> None:
    task = load_task(name)
    prompt = task.config.prompt
    sources = [s for s in (prompt.template, prompt.answer, prompt.system) if s]
    for source in sources:
        unknown = meta.find_undeclared_variables(jinja2.Environment().parse(source))
        assert unknown <= {*RECORD, "starter_code", "package_constant"}, unknown
        for starter in STARTERS:
            record = {**RECORD, "starter_code": starter}
            sandboxed = PromptBuilder(PromptConfig(template=source), name).build(record)
            assert sandboxed == plain_render(source, record)


SYSTEM = ".__init__.__globals__.os.system('touch MARKER')"
HOSTILE = [
    "{{ cycler" + SYSTEM + " }}",
    "{{ package_constant.__wrapped__.__globals__['os'].system('touch MARKER') }}",
    "{{ lipsum.__globals__.os.popen('touch MARKER') }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ '{0.__init__.__globals__}'.format(cycler) }}{{ joiner" + SYSTEM + " }}",
    "{% set _ = [].append(1) %}{{ joiner" + SYSTEM + " }}",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_a_template_that_reaches_for_python_is_refused_and_runs_nothing(
    tmp_path: Path, template: str
) -> None:
    marker = tmp_path / "ran"
    task_file = tmp_path / "hostile.yaml"
    shipped = (Path(__file__).parents[1] / "configs" / "tasks" / "arithmetic.yaml").read_text()
    head, _, _ = shipped.partition("prompt:")
    task_file.write_text(
        head + "prompt:\n  template: " + json.dumps(template.replace("MARKER", str(marker))) + "\n"
        "sampling:\n  max_tokens: 8\nscorer:\n  kind: math\n"
    )
    task = load_task(str(task_file))
    with pytest.raises(
        ConfigError, match=rf"^{re.escape(str(task_file))}: prompt\.template was refused by the "
    ):
        task.samples(limit=1)
    assert not marker.exists()


@pytest.mark.parametrize(
    "module_file", ["sidefx.sub/x.py", "sidefx/../sidefx/x.py", "sidefx//x.py"]
)
def test_package_constant_imports_nothing_and_stays_inside_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module_file: str
) -> None:
    marker = tmp_path / "imported"
    package = tmp_path / "sidefx"
    package.mkdir()
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (package / "x.py").write_text('A = "a"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"must be PACKAGE/PATH\.py"):
        package_constant.__wrapped__(module_file, "A")
    assert not marker.exists()
    assert package_constant.__wrapped__("sidefx/x.py", "A") == "a"
