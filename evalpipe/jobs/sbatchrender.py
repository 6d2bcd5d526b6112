"""JobSpec → sbatch text through the Jinja templates in slurm_templates/ (pure).

Every `{{ }}` in a template must pass through one of the filters below, which return `Shell`
text; the environment's finalize step refuses anything else, so a value can never reach the
script unquoted by accident.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from evalpipe import __version__
from evalpipe.catalog.configpath import shipped_dir
from evalpipe.core import exitcodes
from evalpipe.core.errors import ConfigError
from evalpipe.jobs.jobspec import JobSpec
from evalpipe.rundir.layout import STALL_REQUEUES, RunDir

# What an #SBATCH value may hold bare; anything else is double-quoted (sbatch strips them).
_BARE_DIRECTIVE = re.compile(r"[A-Za-z0-9_./:=,@%+-]+")
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Shell(str):
    """Text that a filter made safe for its place in the script."""


class RenderError(ConfigError):
    """A value cannot be placed in the script safely, or a template is broken."""


def template_dir() -> Path:
    """slurm_templates/: $EVALPIPE_TEMPLATE_DIR, else the one shipped with evalpipe."""
    env = os.environ.get("EVALPIPE_TEMPLATE_DIR")
    return Path(env) if env else shipped_dir("slurm_templates")


def quote(value: Any) -> Shell:
    """One shell word: shlex quoting, so spaces, quotes, $() and newlines stay literal."""
    if value is None or isinstance(value, bool):
        raise RenderError(
            f"Cannot place {value!r} in a shell command; a template is missing a guard."
        )
    return Shell(shlex.quote(str(value)))


def quote_all(values: Iterable[Any]) -> Shell:
    """Several shell words, each quoted, separated by spaces."""
    return Shell(" ".join(quote(v) for v in values))


def directive(value: Any) -> Shell:
    """A value on an #SBATCH line: bare when plain, else double-quoted."""
    text = str(value)
    if _BARE_DIRECTIVE.fullmatch(text):
        return Shell(text)
    if re.search(r'["\\\n\r]', text):
        raise RenderError(
            f"{text!r} cannot go on an #SBATCH line: it holds a quote, backslash or line break."
        )
    return Shell(f'"{text}"')


def option(value: Any) -> Shell:
    """A whole sbatch option from the cluster profile (`--constraint=h100`): one line."""
    text = str(value)
    if not text.startswith("--") or "\n" in text or "\r" in text:
        raise RenderError(f"{text!r} is not one sbatch long option on one line.")
    return Shell(text)


def shell_name(value: Any) -> Shell:
    """A variable name for `export NAME=...`."""
    text = str(value)
    if not _SHELL_NAME.fullmatch(text):
        raise RenderError(f"{text!r} is not a shell variable name.")
    return Shell(text)


def verbatim(value: Any) -> Shell:
    """A cluster profile's setup line: shell code on purpose, so only line breaks are refused."""
    text = str(value)
    if "\n" in text or "\r" in text:
        raise RenderError(f"A setup line must be one line, got {text!r}.")
    return Shell(text)


def comment(value: Any) -> Shell:
    """Text after a `#`: line breaks would end the comment, so they become spaces."""
    return Shell(re.sub(r"[\r\n]+", " ", str(value)))


def _finalize(value: Any) -> Any:
    if isinstance(value, Shell):
        return value
    raise RenderError(
        f"Template bug: {value!r} reaches the script without a quoting filter "
        "(q, qall, directive, option, shell_name, verbatim or comment)."
    )


@cache
def _environment(folder: str) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        # Bash's ${#array[@]} would open a Jinja comment: template comments are {## ... ##}.
        comment_start_string="{##",
        comment_end_string="##}",
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        q=quote,
        qall=quote_all,
        directive=directive,
        option=option,
        shell_name=shell_name,
        verbatim=verbatim,
        comment=comment,
    )
    return env


def _render(
    template: str, spec: JobSpec, *, kind: str, job_name: str, log_pattern: str, node_steps: bool
) -> str:
    import jinja2

    env = _environment(str(template_dir()))
    try:
        return env.get_template(template).render(
            job=spec,
            cluster=spec.cluster,
            plan=spec.plan,
            kind=kind,
            job_name=job_name,
            log_pattern=log_pattern,
            node_steps=node_steps,
            resumable=exitcodes.RESUMABLE,
            preflight=exitcodes.PREFLIGHT,
            stall=exitcodes.STALL,
            stall_requeues=STALL_REQUEUES,
            version=__version__,
        )
    except jinja2.TemplateNotFound as exc:
        raise RenderError(f"No template {exc.name!r} in {template_dir()}.") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(
            f"Template {exc.name or template}, line {exc.lineno}: {exc.message}."
        ) from exc
    except jinja2.UndefinedError as exc:
        raise RenderError(f"Template {template}: {exc}.") from exc


def render_job(spec: JobSpec) -> str:
    """The job's sbatch script: single-node, or multi-node with a Ray cluster."""
    kind = "multi-node job" if spec.multi_node else "job"
    if spec.options.shards > 1:
        kind = f"array job ({spec.options.shards} shards)"
    return _render(
        spec.template,
        spec,
        kind=kind,
        job_name=spec.job_name,
        log_pattern=spec.log_pattern,
        node_steps=spec.multi_node,  # a step per node: the monitors and Ray
    )


def render_merge(spec: JobSpec) -> str:
    """The script of the job that merges an array's shards once every task has ended."""
    return _render(
        "merge.sbatch.j2",
        spec,
        kind="merge job",
        job_name=f"{spec.job_name}-merge",
        log_pattern=RunDir(Path(spec.run_dir)).log_pattern("%j"),
        node_steps=False,
    )
