"""Which container runtimes this machine offers: pyxis (`srun --help` lists --container-image)
and Apptainer or Singularity (on PATH). Read by `evalpipe check`, `site detect` and preflight."""

from __future__ import annotations

import shutil
import subprocess

from evalpipe.catalog.containers import Runtime

PYXIS_FLAG = "--container-image"
# Apptainer was called Singularity; sites run either, with the same exec options.
APPTAINER_COMMANDS = ("apptainer", "singularity")


def find(runtime: Runtime) -> str | None:
    """How this machine offers `runtime` (in words), or None where it does not."""
    if runtime == "pyxis":
        srun = shutil.which("srun")
        if srun is None:
            return None
        try:
            done = subprocess.run(
                [srun, "--help"], capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return f"{srun} --help lists {PYXIS_FLAG}" if PYXIS_FLAG in done.stdout else None
    for command in APPTAINER_COMMANDS:
        path = shutil.which(command)
        if path is not None:
            return path
    return None


def missing_fix(runtime: Runtime) -> str:
    """What a site without `runtime` does about it."""
    if runtime == "pyxis":
        return (
            f"srun --help does not list {PYXIS_FLAG}, so this SLURM has no pyxis plugin (srun "
            f"would answer: unrecognized option '{PYXIS_FLAG}'). Ask the admins for pyxis "
            "(github.com/NVIDIA/pyxis, a plugstack.conf line), or use runtime: apptainer"
        )
    return (
        "neither apptainer nor singularity is on PATH. Load it (`module load apptainer` in the "
        "profile's setup, and here) or ask the admins for it; or use runtime: pyxis"
    )
