"""Ship the job's committed latency samples to InfluxDB, from the driver, off the hot path.

Samples are written beside each batch's results by the state tasks (batch_output.py)
and read once per committed batch, in batch order; the next batch to read is saved in `metrics-position`
so a restarted job carries on where it stopped.
"""
from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections import Counter
from pathlib import Path

from collector.aggregate import IntervalAggregator
from collector.backpressure import WINDOW_S, StepBusy, backpressure_point, step_figures
from collector.points import latency_point
from collector.samples import STEP_CHECK, STEP_SINK, STEP_SOURCE, StepSample, decode_samples

from .results import BatchTail, committed_batches

log = logging.getLogger(__name__)


def run_id_for(state_dir: Path, given: str | None = None) -> str:
    """Return the run id of a state folder, creating it on first use (restarts keep it)."""
    path = Path(state_dir) / "run_id"
    if given:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(given)
        return given
    if path.exists():
        return path.read_text().strip()
    rid = time.strftime("run-%Y%m%d-%H%M%S")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(rid)
    return rid


class MetricsShipper:
    """Background thread: committed batches -> `IntervalAggregator` -> a point writer.

    `writer` is anything with `add(points)` (collector.influx.InfluxWriter in production,
    collector.testing's in-memory writer in unit tests). Besides the latency intervals it
    writes, at most once per `interval_s`, each job step's `backpressure` figures over the
    last 10 s from the tasks' busy times (`tasks`: the job's state tasks, its shards).
    """

    def __init__(self, out_dir: Path, run: str, writer, interval_s: float = 1.0, poll_s: float = 0.5,
                 tasks: int = 1):
        self.out_dir = Path(out_dir)
        self.run = run
        self.writer = writer
        self.poll_s = poll_s
        self.tasks = tasks
        self.interval_ns = int(interval_s * 1e9)
        self.agg = IntervalAggregator(run, interval_s)
        self._busy: collections.deque[StepBusy] = collections.deque()
        self._busy_written_ns = 0
        self._pos = self.out_dir / "metrics-position"
        start = int(self._pos.read_text()) if self._pos.exists() else 0
        self.tail = BatchTail(self.out_dir, start)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-shipper", daemon=True)

    def start(self) -> "MetricsShipper":
        self._thread.start()
        return self

    def ship_once(self, final: bool = False) -> int:
        """Read newly committed batches and hand closed intervals on; return samples read."""
        n = 0
        batches = self.tail.poll()
        for m in batches:
            for blob in m.metrics:
                for s in decode_samples(blob):
                    self.agg.add(s)
                    n += 1
            self._busy.extend(StepBusy.from_bytes(b) for b in m.busy)
        points = [latency_point(ih) for ih in self.agg.drain(time.time_ns(), final)]
        points += self._busy_points()
        if points:
            self.writer.add(points)
        if batches:
            tmp = self._pos.with_name("metrics-position.tmp")
            tmp.write_text(str(self.tail.next_batch))
            os.replace(tmp, self._pos)
        self.samples += n
        return n

    def _busy_points(self) -> list:
        """Each step's busy share over the window ending at the newest task seen."""
        if not self._busy:
            return []
        end = max(b.end_ns for b in self._busy)
        if end - self._busy_written_ns < self.interval_ns:
            return []
        horizon = end - int(WINDOW_S * 1e9)
        while self._busy and self._busy[0].end_ns <= horizon:
            self._busy.popleft()
        self._busy_written_ns = end
        return [backpressure_point(self.run, step, step_figures(self._busy, step, end, self.tasks), end)
                for step in (STEP_SOURCE, STEP_CHECK, STEP_SINK)]

    def add_samples(self, samples: list[StepSample]) -> None:
        """Merge samples recorded outside Spark (e.g. by an in-process ingress)."""
        for s in samples:
            self.agg.add(s)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.ship_once()
            except Exception:            # metrics must never take the job down
                log.exception("shipping metrics failed; will retry")

    def stop(self) -> None:
        """Stop after shipping whatever is committed by now."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.ship_once(final=True)


def committed_intervals(out_dir: Path, run: str) -> Counter:
    """Count of every (interval start ns, step, pipeline, worker) the committed batches hold.

    The ground truth that the `latency` points shipped for `run` must match (tests, benches).
    """
    agg = IntervalAggregator(run)
    for m in committed_batches(out_dir):
        for blob in m.metrics:
            for s in decode_samples(blob):
                agg.add(s)
    return Counter({(ih.start_ns, ih.step, ih.pipeline, ih.worker): ih.hist.total_count
                    for ih in agg.drain(time.time_ns(), final=True)})
