"""A judged run's phases as processes (planning/judgeplacement.py chooses where the judge runs).

After generation, each phase has a process of its own, the generation's gone (its memory with
it) before the judge's starts; run/session.py waits for each with `wait_child`. Side by side,
the GPUs are split between the two and the judge's process starts with the generation.

The generating process starts the judge's (`evalpipe run --phase judge --judge-placement
side-by-side`) with a pipe on its standard input and closes the pipe when generation ends, by
any way, a kill -9 included: the judge then judges every answer written and ends. A stop signal
the waiting process receives is passed on, so every phase checkpoints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from evalpipe.catalog.preset import Preset
from evalpipe.core.errors import DoesNotFitError
from evalpipe.planning.helperplacement import JUDGE, Helper
from evalpipe.run.localplan import LocalGpu, plan_local

POLL_S = 0.2


def split_gpus(
    visible: Sequence[str], *, model_gpus: int | None, judge_gpus: int, helper: Helper = JUDGE
) -> tuple[list[str], list[str]]:
    """(the model's CUDA_VISIBLE_DEVICES entries, the judge's) from the job's visible GPUs: the
    model's first (`model_gpus`, or all the judge leaves), the judge's `judge_gpus` after (or
    another helper model's: `helper`)."""
    model = len(visible) - judge_gpus if model_gpus is None else model_gpus
    if model < 1 or model + judge_gpus > len(visible):
        fix = "Use --judge-placement after, or" if helper == JUDGE else "Use"
        raise DoesNotFitError(
            f"Side by side, the model needs {model_gpus or 'at least 1'} GPU(s) and the "
            f"{helper.name} {judge_gpus}, but {len(visible)} are visible "
            f"({','.join(visible) or 'none'}). {fix} a node with more GPUs."
        )
    return list(visible[:model]), list(visible[model : model + judge_gpus])


def beside_gpus(
    visible: Sequence[LocalGpu],
    judge: Preset | None,
    *,
    tp: int | None,
    pp: int | None,
    replicas: int | None,
) -> tuple[list[str], list[str]]:
    """The split of this node's GPUs (CUDA_VISIBLE_DEVICES entries): the judge preset's
    smallest layout on them (`judge` None: a server's judge, no GPUs), the model the layout it
    was given (a job's) or the rest."""
    entries = [g.entry for g in visible]
    judge_gpus = 0
    if judge is not None:
        layout = plan_local(judge, tp=None, pp=None, replicas=1, max_model_len=None, gpus=visible)
        judge_gpus = layout.tp * layout.pp
    given = tp is not None and pp is not None and replicas is not None
    model = tp * pp * replicas if given else None  # type: ignore[operator]
    return split_gpus(entries, model_gpus=model, judge_gpus=judge_gpus)


def generation_open(stream: object = None) -> Callable[[], bool]:
    """For the judge's process: whether the generation beside it goes on, i.e. its standard
    input (the generating process's pipe) has not reached its end."""
    source = stream if stream is not None else sys.stdin.buffer
    ended = threading.Event()

    def watch() -> None:
        try:
            while source.read(4096):  # type: ignore[attr-defined]
                pass
        finally:
            ended.set()

    threading.Thread(target=watch, name="evalpipe-generation-watch", daemon=True).start()
    return lambda: not ended.is_set()


class JudgeBeside:
    """The judge's process beside this one's generation."""

    def __init__(self, command: Sequence[str], *, gpus: Sequence[str] | None) -> None:
        env = dict(os.environ)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        self.process = subprocess.Popen(list(command), stdin=subprocess.PIPE, env=env)

    def finish(self, requested: Callable[[], str | None]) -> int:
        """Tell the judge the generation has ended and wait for it (see `wait_child`)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        return wait_child(self.process, requested)


def wait_child(process: subprocess.Popen, requested: Callable[[], str | None]) -> int:
    """Wait for a phase's process, passing on the stop signal this one received (`requested`:
    its name, e.g. SIGUSR1, now or while waiting); the child's exit status (128 + N when
    signal N killed it)."""
    told = False
    while process.poll() is None:
        name = requested()
        if name is not None and not told:
            process.send_signal(signal.Signals[name])
            told = True
        time.sleep(POLL_S)
    code = process.returncode
    return code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it
