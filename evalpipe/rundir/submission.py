"""What `evalpipe submit` leaves in a run directory before the job starts: plan.json (the
planner's Plan) and submission.json (the `Submission` record), with their readers.

The estimate and the choice are kept as the JSON the estimate wrote (evalpipe.estimate sits
above this layer); the figures readers compare against, per-job wall and GPU-hours, are read
from it as Spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalpipe.core.errors import DamagedFileError, RunDirError
from evalpipe.core.span import Span
from evalpipe.planning.planner import Plan
from evalpipe.rundir.layout import RunDir
from evalpipe.rundir.samplelog import read_json, write_json

# submission.json's own version; readers accept it and older ones.
SUBMISSION_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class Submission:
    """One `evalpipe submit`: what was run to submit it, the job ids, and what it cost to be."""

    executor: str
    argv: list[list[str]]  # the sbatch command lines, in order
    job_id: str
    merge_job_id: str | None
    shards: int
    preset: str
    cluster: str
    preflight: dict[str, Any]  # {"checked": bool, "warnings": [...]} or why it was skipped
    submitted_at: str
    estimate: dict[str, Any] | None = None  # Estimate.to_dict(); None when none was made
    choice: dict[str, Any] | None = None  # Choice.to_dict() when the estimate chose the shape
    no_estimate: str | None = None  # why there is no estimate
    schema: int = SUBMISSION_SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know

    def predicted(self, figure: str) -> Span | None:
        """The estimate's `wall_s` (per job) or `gpu_hours` (all jobs); None without one."""
        value = (self.estimate or {}).get(figure)
        return None if value is None else Span.from_dict(value)

    def to_dict(self) -> dict[str, Any]:
        return self.extra | {
            "schema": self.schema,
            "executor": self.executor,
            "argv": self.argv,
            "job_id": self.job_id,
            "merge_job_id": self.merge_job_id,
            "shards": self.shards,
            "preset": self.preset,
            "cluster": self.cluster,
            "preflight": self.preflight,
            "submitted_at": self.submitted_at,
            "estimate": self.estimate,
            "choice": self.choice,
            "no_estimate": self.no_estimate,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "submission.json") -> Submission:
        if "job_id" not in data:
            raise DamagedFileError(
                f"{where} names no job_id; it was not written by `evalpipe submit`."
            )
        schema = data.get("schema")
        if not isinstance(schema, int) or schema > SUBMISSION_SCHEMA:
            raise DamagedFileError(
                f"{where} has schema {schema!r}; this evalpipe reads schema "
                f"{SUBMISSION_SCHEMA} and older. Upgrade evalpipe to read it."
            )
        merge_job_id = data.get("merge_job_id")
        try:
            submission = cls(
                schema=schema,
                executor=str(data.get("executor") or "sbatch"),
                argv=[[str(a) for a in argv] for argv in data.get("argv") or []],
                job_id=str(data["job_id"]),
                merge_job_id=None if merge_job_id is None else str(merge_job_id),
                shards=int(data.get("shards", 1)),
                preset=str(data.get("preset") or ""),
                cluster=str(data.get("cluster") or ""),
                preflight=dict(data.get("preflight") or {}),
                submitted_at=str(data.get("submitted_at") or ""),
                estimate=data.get("estimate"),
                choice=data.get("choice"),
                no_estimate=data.get("no_estimate"),
                extra={k: v for k, v in data.items() if k not in _KEYS},
            )
            for figure in ("wall_s", "gpu_hours"):  # checked once here, not by each reader
                submission.predicted(figure)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DamagedFileError(f"{where} is not a complete submission ({exc!r}).") from exc
        return submission


_KEYS = (
    "schema", "executor", "argv", "job_id", "merge_job_id", "shards", "preset", "cluster",
    "preflight", "submitted_at", "estimate", "choice", "no_estimate",
)  # fmt: skip


def write_submission(files: RunDir, submission: Submission) -> None:
    write_json(files.submission, submission.to_dict())


def read_submission(files: RunDir) -> Submission:
    """The run's submission record; RunDirError when it has none or it cannot be read,
    DamagedFileError when it is not a submission this evalpipe reads."""
    if not files.submission.exists():
        raise RunDirError(
            f"{files.path} holds no {files.submission.name}: it was not submitted by "
            "`evalpipe submit`."
        )
    return Submission.from_dict(read_json(files.submission), where=str(files.submission))


def write_plan(files: RunDir, plan: Plan) -> None:
    write_json(files.plan, plan.to_dict())


def read_plan(files: RunDir) -> Plan | None:
    """The plan `evalpipe submit` wrote beside the run; None for a run not submitted."""
    if not files.plan.exists():
        return None
    try:
        return Plan.from_dict(read_json(files.plan))
    except ValueError as exc:
        raise DamagedFileError(f"{files.plan} is not a plan ({exc}).") from exc
