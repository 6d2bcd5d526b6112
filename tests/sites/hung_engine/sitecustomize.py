"""Test fault only: in every Python process of a job, `--backend fake` is a HungEngine that
answers $EVALPIPE_FAKE_HANG_AFTER requests and then stops progressing (the stall watchdog's
SLURM test). A test profile puts this folder on PYTHONPATH, beside the checkout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from evalpipe.catalog.preset import Preset
from evalpipe.engine import factory
from evalpipe.engine.protocol import Engine, EngineSettings

sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/, as pytest puts it
from hung_engine import HungEngine

HANG_AFTER = int(os.environ["EVALPIPE_FAKE_HANG_AFTER"])


def _hung(preset: Preset, settings: EngineSettings) -> Engine:
    return HungEngine(preset, settings, hang_after=HANG_AFTER)


factory.BACKENDS["fake"] = _hung
