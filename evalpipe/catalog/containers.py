"""A cluster profile's `container:` block: the image every process of a job runs in (pyxis or
Apptainer), checked once when the profile loads (docs/slurm.md, Containers)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal, get_args

from evalpipe.core.configio import ENV_NAME

Runtime = Literal["pyxis", "apptainer"]
RUNTIMES: tuple[str, ...] = get_args(Runtime)
# Commands that wrap Python in a container: with a `container:` block evalpipe launches the
# image itself, so a `python:` that starts with one of these would launch it twice.
LAUNCHERS = frozenset({"apptainer", "singularity", "srun", "enroot", "docker", "podman", "ch-run"})
# What an image file is called: pyxis imports enroot squashfs files, Apptainer runs SIF files.
IMAGE_SUFFIX = {"pyxis": ".sqsh", "apptainer": ".sif"}


def is_image_file(image: str) -> bool:
    """A path to an image file rather than a registry reference (pyxis takes a path only when
    it starts with / or ./, NVIDIA/pyxis #127)."""
    return image.startswith(("/", "./"))


def cached_sif_name(image: str) -> str:
    """The file a registry reference is pulled into, in `sif_cache`: one per reference, so a
    second job (and a second submission) finds it instead of pulling again."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", image.removeprefix("docker://")).strip("_") + ".sif"


@dataclass(frozen=True, kw_only=True)
class Mount:
    """One `SOURCE[:DESTINATION[:ro]]` entry, as both runtimes write it."""

    source: str
    destination: str
    read_only: bool = False

    @classmethod
    def parse(cls, text: str) -> Mount:
        parts = text.split(":")
        if len(parts) > 3 or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise ValueError(
                f"mount {text!r} is not SOURCE[:DESTINATION[:ro]] (a path holds no ':')"
            )
        source = parts[0]
        destination = parts[1] if len(parts) > 1 else source
        for path in (source, destination):
            if not PurePosixPath(path).is_absolute():
                raise ValueError(f"mount {text!r}: {path!r} must be an absolute path")
        return cls(source=source, destination=destination, read_only=parts[2:] == ["ro"])

    def spec(self) -> str:
        return f"{self.source}:{self.destination}" + (":ro" if self.read_only else "")


@dataclass(frozen=True, kw_only=True)
class Container:
    """The image a job runs in, and what of the node it sees."""

    runtime: Runtime
    # A registry reference (nvcr.io#nvidia/vllm:25.01 for pyxis, docker://vllm/vllm-openai:v0.9
    # for Apptainer), an enroot .sqsh path or an Apptainer .sif path.
    image: str
    # SOURCE[:DESTINATION[:ro]] bound into the container, besides what evalpipe mounts itself
    # (the run directory, cache_dir, hf_cache, scratch_dir): weights, the site's scratch.
    mounts: tuple[str, ...] = ()
    # Names of further variables passed from the job into the container (the profile's `env`,
    # SLURM_*, CUDA_VISIBLE_DEVICES and HF_HOME always are): tokens, tracker keys.
    env: tuple[str, ...] = ()
    workdir: str | None = None  # the working directory inside the container
    # Apptainer with a registry reference: the shared folder it is pulled into once
    # (`apptainer pull`), read by every job; never pulled per job.
    sif_cache: str | None = None

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(
                f"container runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}: a "
                "profile runs one runtime; write one profile per runtime"
            )
        texts = [self.image, *self.mounts, *(p for p in (self.workdir, self.sif_cache) if p)]
        for text in texts:
            if not isinstance(text, str) or not text or re.search(r"[\n\r,]", text):
                raise ValueError(
                    f"container value {text!r} must be non-empty text on one line without "
                    "commas (both runtimes separate their lists with commas)"
                )
        for mount in self.mounts:
            Mount.parse(mount)
        for name in self.env:
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                raise ValueError(f"container env {name!r} is not a variable name to pass through")
        for key in ("workdir", "sif_cache"):
            value = getattr(self, key)
            if value is not None and not PurePosixPath(value).is_absolute():
                raise ValueError(f"container {key} {value!r} must be an absolute path")
        suffix = IMAGE_SUFFIX[self.runtime]
        other = IMAGE_SUFFIX["apptainer" if self.runtime == "pyxis" else "pyxis"]
        if self.image.endswith(other):
            raise ValueError(
                f"container image {self.image!r} is a {other} file, which {self.runtime} does "
                f"not run: give a {suffix} file or a registry reference, or change the runtime"
            )
        if self.image.endswith(suffix) and not is_image_file(self.image):
            raise ValueError(
                f"container image {self.image!r} looks like a file but does not start with / "
                "or ./; pyxis would take it for a registry reference (NVIDIA/pyxis #127). "
                "Write it as an absolute path or ./" + self.image
            )
        pulled = self.runtime == "apptainer" and not is_image_file(self.image)
        if pulled and self.sif_cache is None:
            raise ValueError(
                f"container image {self.image!r} is a registry reference: Apptainer would "
                "pull and convert it in every job. Set container.sif_cache to a shared folder; "
                "pull it there once (`evalpipe check` prints the command)"
            )
        if self.sif_cache is not None and not pulled:
            raise ValueError(
                "container sif_cache is for an Apptainer registry reference; "
                f"{self.runtime} image {self.image!r} needs none: drop it"
            )

    @property
    def image_path(self) -> str | None:
        """The image file the job runs (an Apptainer reference: its copy in sif_cache); None
        for a pyxis registry reference, which enroot imports itself."""
        if is_image_file(self.image):
            return self.image
        if self.sif_cache is not None:
            return str(PurePosixPath(self.sif_cache) / cached_sif_name(self.image))
        return None

    @property
    def launch_image(self) -> str:
        """What the launch line names: the file where there is one, else the reference."""
        return self.image_path or self.image
