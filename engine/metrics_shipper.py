"""Ship the job's committed latency samples to InfluxDB, from the driver, off the hot path.

Samples arrive in the sink's batch manifests (spark_sink.py), so they are read once per
committed batch, in batch order; the next batch to read is saved in `metrics-position`
so a restarted job carries on where it stopped.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from collector.aggregate import IntervalAggregator
from collector.points import latency_point
from collector.samples import StepSample, decode_samples

from .results import ManifestTail

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
    """Background thread: manifests -> `IntervalAggregator` -> a point writer.

    `writer` is anything with `add(points)` (collector.influx.InfluxWriter in production,
    collector.testing's in-memory writer in unit tests).
    """

    def __init__(self, out_dir: Path, run: str, writer, interval_s: float = 1.0, poll_s: float = 0.5):
        self.out_dir = Path(out_dir)
        self.writer = writer
        self.poll_s = poll_s
        self.agg = IntervalAggregator(run, interval_s)
        self._pos = self.out_dir / "metrics-position"
        start = int(self._pos.read_text()) if self._pos.exists() else 0
        self.tail = ManifestTail(self.out_dir, start)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-shipper", daemon=True)

    def start(self) -> "MetricsShipper":
        self._thread.start()
        return self

    def ship_once(self, final: bool = False) -> int:
        """Read newly committed batches and hand closed intervals on; return samples read."""
        n = 0
        manifests = self.tail.poll()
        for m in manifests:
            for blob in m.get("metrics", ()):
                for s in decode_samples(blob):
                    self.agg.add(s)
                    n += 1
        points = [latency_point(ih) for ih in self.agg.drain(time.time_ns(), final)]
        if points:
            self.writer.add(points)
        if manifests:
            tmp = self._pos.with_name("metrics-position.tmp")
            tmp.write_text(str(self.tail.next_batch))
            os.replace(tmp, self._pos)
        self.samples += n
        return n

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
