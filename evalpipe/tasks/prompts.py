"""Records → prompts: sandboxed Jinja templates, zero- or few-shot, plain text or chat."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import jinja2
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evalpipe.core.errors import ConfigError
from evalpipe.records.prompt import Prompt
from evalpipe.tasks.config import PromptConfig
from evalpipe.tasks.packaged import package_constant, source_of
from evalpipe.tasks.packages import Source
from evalpipe.tasks.records import Record

# A task file is text from anywhere: its templates render in Jinja's sandbox, which refuses
# the attribute walks (`cycler.__init__.__globals__.os`) that reach Python from a template, and
# any change to the records they read.
# trim_blocks/lstrip_blocks: `{% for %}` lines in a YAML block leave no stray blank lines.
_ENV = ImmutableSandboxedEnvironment(
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
# A reference implementation's own prompt text, e.g. GPQA's:
# {{ package_constant("simple_evals/common.py", "QUERY_TEMPLATE_MULTICHOICE").format(…) }}
_READER = "package_constant"
_ENV.globals[_READER] = package_constant


class PromptBuilder:
    """Compiles a task's templates once; `where` (the task file) prefixes every error."""

    def __init__(self, config: PromptConfig, where: str) -> None:
        self._config = config
        self._where = where
        self._question = self._compile("template", config.template)
        self._answer = self._compile("answer", config.answer) if config.answer else None
        self._system = self._compile("system", config.system) if config.system else None
        given = {"template": config.template, "answer": config.answer, "system": config.system}
        self.packages = tuple(
            sorted({s for key, text in given.items() if text for s in self._sources(key, text)})
        )

    def _sources(self, key: str, source: str) -> Iterator[Source]:
        """The packages the template's `package_constant` calls read from: what the run
        records the versions of (so each call names its module as a quoted string, or as a
        name the template `{% set %}`s to one)."""
        tree = _ENV.parse(source)
        literals: dict[str, list[str | None]] = {}
        for assign in tree.find_all(jinja2.nodes.Assign):
            if isinstance(assign.target, jinja2.nodes.Name):
                value = assign.node.value if isinstance(assign.node, jinja2.nodes.Const) else None
                literals.setdefault(assign.target.name, []).append(value)
        for call in tree.find_all(jinja2.nodes.Call):
            if not (isinstance(call.node, jinja2.nodes.Name) and call.node.name == _READER):
                continue
            module = call.args[0] if call.args else None
            if isinstance(module, jinja2.nodes.Const):
                modules = [module.value]
            elif isinstance(module, jinja2.nodes.Name):
                modules = literals.get(module.name, [None])
            else:
                modules = [None]
            if not all(isinstance(m, str) for m in modules):
                raise ConfigError(
                    f"{self._where}: prompt.{key} calls {_READER} with a module that is not a "
                    f'quoted string; name it as written, e.g. {_READER}("simple_evals/common.py", '
                    '"NAME"), so that the run can record the version of the package it reads.'
                )
            yield from (source_of(m) for m in modules)

    def _compile(self, key: str, source: str) -> jinja2.Template:
        try:
            return _ENV.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(
                f"{self._where}: prompt.{key} is not a valid Jinja template "
                f"(line {exc.lineno}: {exc.message})."
            ) from exc

    def _render(self, key: str, template: jinja2.Template, record: Record) -> str:
        try:
            return template.render(record)
        except jinja2.UndefinedError as exc:
            raise ConfigError(
                f"{self._where}: prompt.{key} uses an undefined value ({exc.message}). "
                f"Available: {', '.join(sorted(record))}. Map it under `fields:`."
            ) from exc
        except jinja2.exceptions.SecurityError as exc:
            raise ConfigError(
                f"{self._where}: prompt.{key} was refused by the template sandbox ({exc}). "
                "A prompt template may read the record's fields, loop, filter and call "
                "package_constant, but not reach Python internals (dunder attributes, "
                "functions' globals) or change values; remove that expression from the task file."
            ) from exc

    def build(self, record: Record, shots: Sequence[Record] = ()) -> Prompt:
        """The prompt for `record`, preceded by the worked examples `shots`."""
        system = self._render("system", self._system, record) if self._system else None
        examples = [
            (self._render("template", self._question, s), self._render_answer(s)) for s in shots
        ]
        question = self._render("template", self._question, record)
        if self._config.chat:
            messages = [{"role": "system", "content": system}] if system else []
            for q, a in examples:
                messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            return [*messages, {"role": "user", "content": question}]
        parts = [system] if system else []
        parts += [q + a for q, a in examples]
        return self._config.separator.join([*parts, question])

    def _render_answer(self, record: Record) -> str:
        if self._answer is None:  # guarded by PromptConfig: shots need an answer template
            raise ConfigError(f"{self._where}: few-shot prompts need prompt.answer.")
        return self._render("answer", self._answer, record)
