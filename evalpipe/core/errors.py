"""Typed errors: every user-facing failure says what was wrong, the value, and what to do.

The CLI turns any EvalpipeError into its exit status (1 unless the class says otherwise, see
evalpipe.core.exitcodes) with its message on stderr; anything else escaping is a bug and keeps its
traceback.
"""

from __future__ import annotations

from evalpipe.core import exitcodes


class EvalpipeError(Exception):
    """Base of all errors a user can cause or fix."""

    exit_status = exitcodes.ERROR


class ConfigError(EvalpipeError):
    """A setting (in a YAML file or a command-line option) is malformed, unknown or inconsistent."""


class UnknownNameError(ConfigError):
    """A preset, GPU, cluster, task or category name that is not in the registry."""


class LayoutError(EvalpipeError):
    """A tensor/pipeline parallel layout that vLLM or the hardware would refuse."""


class DoesNotFitError(EvalpipeError):
    """No allowed GPU count holds the model; the message says what would."""


class SlurmError(EvalpipeError):
    """The scheduler refused or failed a command; the message quotes its own words."""


class SlurmUnreachable(SlurmError):
    """slurmctld did not answer (down, or too busy within its message timeout): the job's state
    is unknown for now, not ended."""


class EngineError(EvalpipeError):
    """The inference engine could not be built or failed while generating."""


class MissingDependencyError(EvalpipeError):
    """An optional dependency is absent; the message names the extra to install."""


class DatasetError(EvalpipeError):
    """A dataset could not be found or read; the message says how to make it available."""


class ResumeMismatchError(EvalpipeError):
    """A run directory was started with a different configuration than the one resuming it."""


class RunDirError(EvalpipeError):
    """A results path or run directory is missing, unreadable or inconsistent (e.g. shards that
    disagree); the message names the file."""


class DamagedFileError(RunDirError):
    """A run-directory file was read but is not what it should be (damaged, incomplete, or a
    newer schema); readers that can go on without it (reports, estimates) warn instead."""


class RunDirLockedError(RunDirError):
    """Another process (run, resume or merge) holds the run directory; the message names it."""


class StorageError(EvalpipeError):
    """Writing the run directory failed in the file system (full, quota, read-only, I/O error,
    removed): what was written before is safe, and the message says how to resume."""

    exit_status = exitcodes.STORAGE


class SandboxError(EvalpipeError):
    """The code sandbox could not start or talk to its server process."""


class PreflightError(EvalpipeError):
    """A login-node check found what the job would fail on (weights, template, dataset)."""


class EstimateError(EvalpipeError):
    """A cost estimate cannot be made: no figures for the device, or the work is unknown."""
