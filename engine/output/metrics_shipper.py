"""Ship the job's committed latency samples to InfluxDB, from the driver, off the hot path.

The state tasks write each batch's stamps beside its results (engine/formats/batch.py); they
are read once per committed batch, in batch order, and histogrammed here, off the
batch's path (engine.formats.stamps). An interval's samples come from several
batches and reach InfluxDB seconds after they were read, so what a restarted job must
re-read is saved in `metrics-position` as a `ShipPosition`: the oldest batch holding a
sample of an interval not yet delivered, and the start of the oldest such interval (or
of the oldest one a batch still to come may add to: a delivered interval re-emitted with
a late sample must be rebuilt whole).
A restart re-reads from that batch and rebuilds every interval from that start whole
(a point with the same tags and time replaces the one stored before); samples of older
intervals, delivered already, are skipped.
"""
from __future__ import annotations

import collections
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from collector.aggregate import IntervalAggregator
from collector.background import lower_thread_priority
from collector.backpressure import WINDOW_S, StepBusy, backpressure_point, step_figures
from collector.points import latency_point
from collector.samples import STEP_CHECK, STEP_SINK, STEP_SOURCE, StepSample, decode_samples

from engine.formats.batch import BatchTail
from engine.formats.stamps import BatchStamps, interval_samples, is_stamps, stamps_samples

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


@dataclass(frozen=True)
class ShipPosition:
    """Where a restarted shipper resumes: read committed batches from `batch` on and skip
    their samples of intervals starting before `floor_ns` (those reached InfluxDB)."""
    batch: int = 0
    floor_ns: int = 0

    @classmethod
    def load(cls, path: Path) -> "ShipPosition":
        """Read a saved position (a bare batch number, the older format, has no floor)."""
        try:
            parts = path.read_text().split()
        except FileNotFoundError:
            return cls()
        return cls(*(int(p) for p in parts[:2]))

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{self.batch} {self.floor_ns}\n")
        os.replace(tmp, path)


class MetricsShipper:
    """Background thread: committed batches -> `IntervalAggregator` -> a point writer.

    `writer` is a `PointSink`: `add(points)` returns a ticket, `delivered()` the newest
    ticket fully stored (collector.influx.InfluxWriter in production, collector.testing's
    in-memory writer in unit tests). Besides the latency intervals it writes, at most once
    per `interval_s`, each job step's `backpressure` figures over the last 10 s from the
    tasks' busy times (`tasks`: the job's state tasks, its shards).
    """

    def __init__(self, out_dir: Path, run: str, writer, interval_s: float = 1.0, poll_s: float = 0.5,
                 tasks: int = 1):
        self.out_dir = Path(out_dir)
        self.run = run
        self.writer = writer
        self.poll_s = poll_s
        self.tasks = tasks
        self.interval_ns = int(interval_s * 1e9)
        self._busy: collections.deque[StepBusy] = collections.deque()
        self._busy_written_ns = 0
        self._pos = self.out_dir / "metrics-position"
        self._saved = ShipPosition.load(self._pos)
        self.floor_ns = self._saved.floor_ns
        # a rollup is emitted only whole: those starting before the floor are not re-read whole
        self.agg = IntervalAggregator(run, interval_s, born_ns=self.floor_ns or None)
        self.tail = BatchTail(self.out_dir, self._saved.batch, reader="the metrics shipper")
        self._newest: dict[int, int] = {}        # batch id -> newest interval start of its samples
        # No batch still to come holds a sample older than this: a batch's tasks run after
        # the batch before it committed (one interval's margin for clock granularity)
        self._settled_ns = self.floor_ns
        self._unsent: collections.deque[tuple[int, int]] = collections.deque()  # (ticket, oldest start)
        self.samples = 0
        self.skipped = 0                          # events of re-read samples delivered before a restart
        self.unreadable = 0                       # shards' figures skipped as unreadable
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-shipper", daemon=True)

    def start(self) -> "MetricsShipper":
        if self._saved != ShipPosition():
            log.info("metrics: resuming at batch %d, rebuilding intervals from %s", self._saved.batch,
                     time.strftime("%H:%M:%S", time.localtime(self.floor_ns / 1e9)))
        self._thread.start()
        return self

    def ship_once(self, final: bool = False) -> int:
        """Read newly committed batches and hand closed intervals on; return samples merged."""
        n = 0
        stamps: list[BatchStamps] = []
        for m in self.tail.poll():
            newest = None
            for blob in m.metrics:
                try:
                    if is_stamps(blob):
                        st = BatchStamps.from_bytes(blob)
                        times = [st.newest_ns] if st.newest_ns is not None else []
                        stamps.append(st)
                    else:                           # a batch written by a version before the stamps
                        samples = decode_samples(blob)
                        times = [s.ts_ns for s in samples]
                        n += sum(self._add(s) for s in samples)
                except (ValueError, TypeError, struct.error) as e:   # intact on disk (CRC), not figures
                    self._unreadable(f"batch {m.batch}: a shard's latency figures", e)
                    continue
                for ts in times:
                    start = ts - ts % self.interval_ns
                    if start >= self.floor_ns:
                        newest = start if newest is None else max(newest, start)
            if newest is not None:
                self._newest[m.batch] = newest
            if m.committed_ns:
                settled = m.committed_ns - self.interval_ns
                self._settled_ns = max(self._settled_ns, settled - settled % self.interval_ns)
            for b in m.busy:
                try:
                    self._busy.append(StepBusy.from_bytes(b))
                except ValueError as e:
                    self._unreadable(f"batch {m.batch}: a shard's busy times", e)
        n += sum(self._add(s) for s in self._samples(stamps))
        now = time.time_ns()
        closed = self.agg.drain(now, final)
        points = [latency_point(ih) for ih in closed] + self._busy_points()
        if points:
            ticket = self.writer.add(points)
            starts = [ih.start_ns for ih in closed if not ih.rollup]
            if starts:
                self._unsent.append((ticket, min(starts)))
        self._save_position(now)
        self.samples += n
        return n

    def _samples(self, stamps: list[BatchStamps]) -> list[StepSample]:
        """The stamps' samples merged per worker and interval; should one batch's not add
        up (a rejected order its runs do not hold), batch by batch without it."""
        try:
            return interval_samples(stamps, self.interval_ns)
        except ValueError:
            out = []
            for st in stamps:
                try:
                    out.extend(stamps_samples(st))
                except ValueError as e:
                    self._unreadable(f"{st.worker}: a shard's latency figures", e)
            return out

    def _unreadable(self, what: str, e: Exception) -> None:
        """Count and log figures intact on disk that do not decode; the caller skips them."""
        self.unreadable += 1
        log.warning("%s are unreadable (%s); skipped", what, e)

    def _add(self, s: StepSample) -> bool:
        """Merge a sample unless its interval reached InfluxDB before a restart."""
        if s.ts_ns - s.ts_ns % self.interval_ns < self.floor_ns:
            self.skipped += s.counts.total
            return False
        self.agg.add(s)
        return True

    def _save_position(self, now_ns: int) -> None:
        """Save where a restart must re-read from, given what the writer has delivered."""
        delivered = self.writer.delivered()
        while self._unsent and self._unsent[0][0] <= delivered:
            self._unsent.popleft()
        # the floor: the oldest interval a restart must rebuild, undelivered or still open
        # to samples of batches to come
        floor = min([start for _, start in self._unsent] + [self._settled_ns])
        oldest = self.agg.oldest_pending()
        if oldest is not None:
            floor = min(floor, oldest)
        batch = min((b for b, newest in self._newest.items() if newest >= floor), default=self.tail.next_batch)
        # a batch older than the aggregator's memory can no longer complete an interval
        horizon = now_ns - self.agg.retain_ns - self.interval_ns
        for b in [b for b, newest in self._newest.items() if newest < min(floor, horizon)]:
            del self._newest[b]
        pos = ShipPosition(batch, floor)
        if pos != self._saved:
            pos.save(self._pos)
            self._saved = pos

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
        lower_thread_priority()
        while not self._stop.wait(self.poll_s):
            try:
                self.ship_once()
            except Exception:            # metrics must never take the job down
                log.exception("shipping metrics failed; will retry")

    def stop(self) -> None:
        """Stop after shipping whatever is committed by now."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.ship_once(final=True)
