"""Where an engine's model ran, as its description (`Engine.describe()["device"]`) names it."""

from __future__ import annotations

# The device of an engine whose model runs on a server elsewhere: reports show the run's device
# as this instead of the client's CPU readings.
REMOTE_DEVICE = "remote"
