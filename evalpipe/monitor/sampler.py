"""Sample the job's GPUs through NVML (or, without NVML, this process's CPU and RSS) into
metrics.csv, tagged with the runner's current phase, and summarise each device at the end.

    with Monitor(RunDir(run_dir).metrics, interval_s=1.0) as monitor:
        monitor.set_phase("load")
        ...
    devices = monitor.stop()   # per-device summaries for summary.json

The sampler is a daemon thread that never raises into the run: NVML readings a device does not
support stay empty, other failures are logged once. Rows are appended and flushed per sample,
so a killed job keeps its series and a resumed one continues it (time and energy carry on).

NVML sees only its own node. On a multi-node run the runner's monitor publishes its phase and
clock (`publish_phase`), and `evalpipe monitor --follow RUN_DIR` on every other node records
that node's GPUs into metrics-<host>.csv on the same clock and phases (`follow_phase`).
"""

from __future__ import annotations

import csv
import enum
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.monitor import csvlog, phase
from evalpipe.monitor.cpu import CpuSource, job_on_this_node
from evalpipe.monitor.devicesummary import DeviceSummary, Tally, summarise
from evalpipe.monitor.nvml import GpuSource
from evalpipe.monitor.readings import LogOnce, Source, log
from evalpipe.monitor.visible_gpus import visible_devices

# How long set_phase() and stop() wait for a sampler stuck in a hung driver call (a GPU fallen
# off the bus) before going on without it.
_STUCK_AFTER_S = 10.0


class _Default(enum.Enum):
    FROM_ENV = enum.auto()


class Monitor:
    """Per-device time series of one job on one node. See the module docstring."""

    def __init__(
        self,
        out_csv: Path,
        *,
        interval_s: float = 1.0,
        nvml: Any | None = None,
        host: str | None = None,
        visible_devices: str | _Default | None = _Default.FROM_ENV,
        publish_phase: Path | None = None,
        follow_phase: Path | None = None,
        node_csvs: Callable[[], Sequence[Path]] = tuple,
    ) -> None:
        """`nvml`: the pynvml module or a FakeNvml (default: import pynvml when started).
        `host`: the node name written in each row (default: $SLURMD_NODENAME, else the
        hostname). `visible_devices`: a CUDA_VISIBLE_DEVICES value; None means unset (every GPU
        on the node); by default the environment's. `publish_phase`: a file where the runner's
        monitor keeps its phase and clock for the other nodes' monitors; `follow_phase`: such a
        file, read by a monitor on another node, which then records only while that run is on,
        with its phases and clock (and ignores set_phase). `node_csvs`: the other nodes'
        series, whose devices a publishing monitor's summary adds."""
        if not interval_s > 0:
            raise ConfigError(
                "The monitor's sampling interval must be a positive number of seconds, got "
                f"{interval_s!r}; use e.g. 1 (the default)."
            )
        if publish_phase is not None and follow_phase is not None:
            raise ConfigError(
                "A monitor either publishes its phase (the runner's node) or follows another's "
                f"(the other nodes), not both: got publish_phase={str(publish_phase)!r} and "
                f"follow_phase={str(follow_phase)!r}."
            )
        self.out_csv = Path(out_csv)
        self.interval_s = float(interval_s)
        self.host = host or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        if visible_devices is _Default.FROM_ENV:
            visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._visible = visible_devices
        self._nvml_module = nvml
        self._nvml: Any | None = None  # set once nvmlInit succeeded: owes an nvmlShutdown
        self._once = LogOnce()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase = "start"
        self._sources: list[Source] = []
        self._tallies: dict[tuple[str, str], Tally] = {}
        self._file: Any | None = None
        self._writer: Any | None = None
        self._t0 = 0.0
        self._time_offset = 0.0
        self._failed = False
        self._summaries: list[DeviceSummary] | None = None
        self._publish = publish_phase
        self._follow = follow_phase
        self._node_csvs = node_csvs
        self._epoch0 = 0.0  # wall-clock time of time_s = 0, shared with following monitors
        # Set once a following monitor sees that the run it follows has stopped.
        self.leader_stopped = threading.Event()
        self._leader_seen = False

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Monitor:
        """Open the devices and the CSV, take the first sample, start the sampler thread."""
        if self._thread is not None:
            return self
        with self._lock:
            try:
                self._sources = self._open_sources()
            except Exception:
                # A bug here must cost the metrics, never the evaluation.
                self._failed = True
                log.exception("The monitor could not start; the run goes on without metrics.")
            self._open_csv()
            self._t0 = time.monotonic()
            self._epoch0 = time.time() - self._time_offset
            self._publish_phase(stopped=False)
            self._sample_safely()
        self._thread = threading.Thread(target=self._run, name="evalpipe-monitor", daemon=True)
        self._thread.start()
        return self

    def set_phase(self, name: str) -> None:
        """Tag the following rows with `name` (load, generate:<category>, score:<category>, …).
        A sample is taken at once, so each phase's first row marks its start (and its energy)."""
        if self._follow is not None:
            return
        if not self._lock.acquire(timeout=_STUCK_AFTER_S):
            self._phase = name  # the sampler is stuck in a driver call; do not wait for it
            self._once(logging.WARNING, ("stuck",), "The monitor is stuck in a driver call.")
            return
        try:
            self._phase = name
            if self._thread is not None and self._summaries is None:
                self._publish_phase(stopped=False)
                self._sample_safely()
        finally:
            self._lock.release()

    def stop(self) -> list[DeviceSummary]:
        """Take a last sample, close the CSV and NVML; the per-device summaries (idempotent)."""
        if self._summaries is not None:
            return self._summaries
        if self._thread is None:
            self._summaries = []
            return self._summaries
        self._stopping.set()
        self._thread.join(_STUCK_AFTER_S)
        if not self._lock.acquire(timeout=_STUCK_AFTER_S):
            log.warning("The monitor is stuck in a driver call; summarising without it.")
            self._summaries = self._summarise()
            return self._summaries
        try:
            self._sample_safely()
            self._publish_phase(stopped=True)
            self._close()
            self._summaries = self._summarise()
        finally:
            self._lock.release()
        return self._summaries

    # --- sampling ---------------------------------------------------------------------------

    def _run(self) -> None:
        deadline = self._t0 + self.interval_s
        while not self._stopping.wait(max(0.0, deadline - time.monotonic())):
            with self._lock:
                if self._stopping.is_set() or self._failed:
                    return
                self._sample_safely()
            # Fixed ticks, so the series does not drift; ticks missed while busy are skipped.
            deadline += self.interval_s
            now = time.monotonic()
            if deadline < now:
                deadline = now + self.interval_s

    def _sample_safely(self) -> None:
        if self._failed:
            return
        try:
            self._sample()
        except Exception:
            self._failed = True
            log.exception(
                "The monitor stopped sampling after an unexpected error; the run goes on."
            )

    def _sample(self) -> None:
        now = time.monotonic()
        t = self._time_offset + (now - self._t0)
        if self._follow is not None:
            leader = self._leader(self._follow)
            if leader is None:
                return  # nothing to record before the run starts
            if leader["stopped"]:
                if not self.leader_stopped.is_set():
                    self.leader_stopped.set()
                    if self._tallies:
                        # One reading at the run's end, as the runner's own monitor takes: the
                        # energy this node spent up to it counts, however late this step began.
                        self._record(now, time.time() - leader["t0"])
                return
            self._phase = leader["phase"]
            t = time.time() - leader["t0"]
        self._record(now, t)

    def _record(self, now: float, t: float) -> None:
        rows = []
        for source in self._sources:
            reading = source.read(now)
            self._tallies.setdefault((self.host, source.device), Tally()).add(reading)
            rows.append(csvlog.row(t, self.host, source.device, self._phase, reading))
        if self._writer is None:
            return
        try:
            self._writer.writerows(rows)
            self._file.flush()
        except OSError as err:
            self._once(
                logging.WARNING,
                ("write", type(err).__name__),
                "Cannot write %s (%s); metrics are kept for the summary only.",
                self.out_csv,
                err,
            )

    # --- phase and clock shared across nodes ------------------------------------------------

    def _publish_phase(self, *, stopped: bool) -> None:
        if self._publish is not None:
            state = {"phase": self._phase, "t0": self._epoch0, "stopped": stopped}
            phase.publish(self._publish, state | {"host": self.host}, self._once)

    def _leader(self, path: Path) -> dict[str, Any] | None:
        """The followed run's phase and clock, or None while it is not running."""
        state = phase.read(path, self._once)
        if state is None:
            return None
        if state["stopped"] and not self._leader_seen:
            return None  # left by an earlier attempt of a requeued job: wait for the new one
        self._leader_seen = True
        return state

    # --- devices ----------------------------------------------------------------------------

    def _open_sources(self) -> list[Source]:
        nvml = self._nvml_module
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                return self._cpu_only("nvidia-ml-py is not installed (pip install nvidia-ml-py)")
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            return self._cpu_only(f"NVML is unavailable ({err})")
        self._nvml = nvml
        try:
            gpus = visible_devices(
                nvml, self._visible, device_order=os.environ.get("CUDA_DEVICE_ORDER")
            )
        except nvml.NVMLError as err:
            self._shutdown_nvml()
            return self._cpu_only(f"NVML could not list the GPUs ({err})")
        if not gpus:
            self._shutdown_nvml()
            return self._cpu_only(f"CUDA_VISIBLE_DEVICES={self._visible!r} names no GPU NVML sees")
        log.info(
            "Monitoring %s on %s every %g s.",
            ", ".join(f"gpu{g.ordinal}={g.uuid}" for g in gpus),
            self.host,
            self.interval_s,
        )
        return [GpuSource(nvml, gpu, self._once) for gpu in gpus]

    def _cpu_only(self, why: str) -> list[Source]:
        job = job_on_this_node(os.environ)
        whose = f"job {job[0]}'s processes on {job[1]}" if job else "this process tree"
        log.warning("%s: no GPU metrics; recording the CPU %% and RSS of %s as 'cpu'.", why, whose)
        return [CpuSource(job)]

    def _shutdown_nvml(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is None:
            return
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as err:
            log.warning("nvmlShutdown failed (%s); ignored.", err)

    # --- the CSV ----------------------------------------------------------------------------

    def _open_csv(self) -> None:
        """Append to the run's metrics.csv, continuing time and energy from an earlier attempt."""
        try:
            self.out_csv.parent.mkdir(parents=True, exist_ok=True)
            fresh, self._time_offset = csvlog.restore(self.out_csv, self._tallies)
            for source in self._sources:  # energy goes on from where the last attempt stopped
                tally = self._tallies.get((self.host, source.device))
                if isinstance(source, GpuSource) and tally and tally.energy_j is not None:
                    source.energy_offset_j = tally.energy_j
            self._file = open(self.out_csv, "a", newline="", encoding="utf-8")  # noqa: SIM115
            self._writer = csv.writer(self._file, lineterminator="\n")
            if fresh:
                self._writer.writerow(csvlog.COLUMNS)
                self._file.flush()
        except OSError as err:
            log.warning(
                "Cannot open %s (%s); metrics are kept for the summary only.", self.out_csv, err
            )
            self._file = self._writer = None

    def _close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError as err:
                log.warning("Closing %s failed (%s).", self.out_csv, err)
            self._file = self._writer = None
        self._shutdown_nvml()

    # --- the summary ------------------------------------------------------------------------

    def _summarise(self) -> list[DeviceSummary]:
        """One entry per device in metrics.csv: this attempt's first, then earlier attempts'
        devices on other hosts (whose name and uuid the CSV does not hold); a monitor that
        publishes its phase adds the devices the other nodes' monitors recorded."""
        current = {(self.host, s.device): s for s in self._sources}
        keys = list(current) + [k for k in self._tallies if k not in current]
        own = [summarise(key, self._tallies.get(key, Tally()), current.get(key)) for key in keys]
        if self._publish is None:
            return own
        return own + csvlog.device_summaries(self._node_csvs())
