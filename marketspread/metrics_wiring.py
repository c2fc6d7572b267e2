"""Wire the collector into the job's processes: the InfluxDB writer, ingress metrics and the job's monitor adapter."""
from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from collector.aggregate import IntervalAggregator
from collector.backpressure import STEP_INGRESS as BP_INGRESS
from collector.backpressure import WINDOW_S, IngressSample, backpressure_point, ingress_figures, muted_share
from collector.histogram import SparseCounts, bucket_indices
from collector.influx import InfluxClient, InfluxConfig, InfluxWriter, Point
from collector.points import latency_point
from collector.samples import StepSample, worker_name
from collector.vocabulary import (FIELD_BATCH_ID, FIELD_FROM_SHARDS, FIELD_SECONDS, FIELD_SYMBOLS, FIELD_TO_SHARDS,
                                  INGRESS, INGRESS_BAD, JOB_RESCALE, MARKET_SPREAD_STEPS as STEPS, STEP_INGRESS,
                                  TAG_REASON, TAG_RUN)

from engine.formats.log import read_head
from engine.ingress.stats import read_stats

if TYPE_CHECKING:                        # the ingress process imports this module too: no Spark-side imports
    from engine.config import Config
    from engine.spark.rescale import Rescale

log = logging.getLogger(__name__)


def open_writer(state_dir: Path, name: str, influx: InfluxConfig, background: bool = False) -> InfluxWriter:
    """Start a never-blocking writer to `influx` (`MS_INFLUX_URL`), spooling under the state folder,
    sending every `influx.flush_s` seconds (`MS_INFLUX_FLUSH_S`, 1).

    `background`: its thread runs at a lower CPU priority. Only where the process's own
    latency-critical work is elsewhere (the job's driver: the JVM runs the batches); in
    the ingress a lowered thread holding the GIL would hold up the receive loop.
    """
    cfg = influx
    writer = InfluxWriter(InfluxClient(cfg), Path(state_dir) / "metrics-spool" / name,
                          background=background, interval=cfg.flush_s).start()
    log.info("metrics -> %s database %s (spool %s)", cfg.url, cfg.db, writer.spool_dir)
    return writer


def rescale_point(run: str, r: "Rescale") -> Point:
    """The point that marks a re-partition of the job's checkpoint (the dashboard's marker)."""
    return Point(JOB_RESCALE, {TAG_RUN: run},
                 {FIELD_FROM_SHARDS: r.from_shards, FIELD_TO_SHARDS: r.to_shards, FIELD_BATCH_ID: r.batch,
                  FIELD_SYMBOLS: r.symbols, FIELD_SECONDS: round(r.seconds, 3)}, r.ended_ns)


class IngressMetrics:
    """Turn the ingress' group commits into `ingress` step intervals and status points.

    `on_commit` only appends to a bounded deque (the ingress loop never waits); a thread
    records histograms, merges 1-s intervals and writes them with the ingress' stats.
    """

    def __init__(self, run: str, writer, stats_fn, interval_s: float = 1.0, max_pending: int = 100_000):
        self.run = run
        self.writer = writer
        self.stats_fn = stats_fn
        self.agg = IntervalAggregator(run, interval_s)
        self.worker = worker_name() + "/ingress"
        self.dropped = 0
        self._pending: collections.deque = collections.deque()
        self._recent: collections.deque = collections.deque()     # IngressSample, last 10 s
        self._max = max_pending
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingress-metrics", daemon=True)

    def start(self) -> "IngressMetrics":
        # A first sample at the start: the muted share needs two, and a run shorter than
        # one tick (a replay of a few hundred thousand events) would otherwise report none.
        self._sample(time.time_ns())
        self._thread.start()
        return self

    def on_commit(self, commit_ns: int, appended: list[tuple[str, int, int]]) -> None:
        if len(self._pending) >= self._max:
            self.dropped += 1
            return
        self._pending.append((commit_ns, appended))

    def _drain_pending(self) -> None:
        by_stream: dict[str, list[tuple[int, int]]] = {}
        last_commit = 0
        while self._pending:
            commit_ns, appended = self._pending.popleft()
            last_commit = commit_ns
            for stream, ts, n in appended:
                by_stream.setdefault(stream, []).append((commit_ns - ts, n))
        for stream, vals in by_stream.items():
            arr = np.array(vals, dtype=np.int64)
            # One value per received chunk, weighted by its messages (not one per message).
            idx, inv = np.unique(bucket_indices(arr[:, 0]), return_inverse=True)
            counts = SparseCounts(idx.astype(np.int32), np.bincount(inv, weights=arr[:, 1]).astype(np.int64))
            self.agg.add(StepSample(stream, STEP_INGRESS, self.worker, last_commit, counts))

    def _sample(self, now_ns: int):
        """Read the ingress' stats, keep their muted seconds and backlog; return them."""
        st = self.stats_fn()
        self._recent.append(IngressSample(now_ns, float(st.muted_seconds), int(st.backlog)))
        return st

    def _status_points(self, now_ns: int) -> list[Point]:
        """The ingress' status point and its `backpressure` figures (muted share, backlog)."""
        st = self._sample(now_ns)
        while self._recent and self._recent[0].ts_ns < now_ns - int(WINDOW_S * 1e9):
            self._recent.popleft()
        figures = ingress_figures(list(self._recent), now_ns)
        second = now_ns - now_ns % 1_000_000_000
        # Bad frames per reason category (bounded by reason_category), cumulative like `bad`:
        # the dashboard charts their growth per reason (`ingress_bad`, docs/METRICS.md).
        bad = [Point(INGRESS_BAD, {TAG_RUN: self.run, TAG_REASON: reason}, {"frames": int(n)}, second)
               for reason, n in sorted(st.bad_reasons.items())]
        return [self._status_point(st, now_ns), backpressure_point(self.run, BP_INGRESS, figures, now_ns), *bad]

    def _status_point(self, st, now_ns: int) -> Point:
        return Point(INGRESS, {TAG_RUN: self.run}, {
            "accepted": int(st.accepted_total), "bad": int(st.bad_total), "head": int(st.head),
            "consumed": int(st.consumed), "backlog": int(st.backlog), "muted": bool(st.muted),
            "muted_seconds": float(st.muted_seconds), "mute_episodes": int(st.mute_episodes),
            "dropped_samples": int(self.dropped)}, now_ns - now_ns % 1_000_000_000)

    def _tick(self, final: bool = False) -> None:
        self._drain_pending()
        now = time.time_ns()
        points = [latency_point(ih) for ih in self.agg.drain(now, final)]
        points += self._status_points(now)
        self.writer.add(points)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self._tick()
            except Exception:
                log.exception("ingress metrics failed; will retry")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._tick(final=True)


class IngressMutedShare:
    """The job adapter's `held_back_share`: the ingress' muted share over a window.

    Samples the ingress' `stats.json` (written by the ingress every 100 ms, wherever it
    runs, beside the log the job reads) each time it is asked.
    """

    def __init__(self, log_dir: Path):
        self.log_dir = Path(log_dir)
        self._samples: collections.deque = collections.deque(maxlen=4096)

    def __call__(self, window_s: float) -> float | None:
        st = read_stats(self.log_dir)
        now = time.time_ns()
        if st is not None:
            self._samples.append(IngressSample(now, float(st.get("muted_seconds", 0.0)),
                                               int(st.get("backlog", 0))))
        horizon = now - int(window_s * 1e9)
        return muted_share([s for s in self._samples if s.ts_ns >= horizon])


class Throttled:
    """A gauge read through `fn()` at most once per `every_s`; calls in between get the last value.

    For the listener's per-batch callbacks: the job's state size lists the snapshot folder
    its task writes into, and at 25 batches a second that listing, repeated for a figure
    that moves slowly, was driver CPU on a machine the batch's task shares.
    """

    def __init__(self, fn, every_s: float = 1.0):
        self.fn = fn
        self.every_s = every_s
        self._at: float | None = None
        self._value = None

    def __call__(self):
        now = time.monotonic()
        if self._at is None or now - self._at >= self.every_s:
            self._value, self._at = self.fn(), now
        return self._value


def job_adapter(run: str, log_dir: Path, state_folder: Path):
    """What the Market Spread job adds of itself to the monitor (spark_listener.JobAdapter).

    Its runs are the state folder's (`run`, which the shipper's latency points carry too);
    its source reports no latest offset, so the ingress log's `head` gives the rows behind;
    the ingress' muted share is how much the job held its input back; the job's tasks keep
    their state in shard snapshots under `state_folder`, outside Spark's state store.
    """
    from spark_listener import JobAdapter  # lazy: pyspark; the ingress process imports this module
    from engine.spark.shard_state import state_size  # lazy: with the job, as above
    return JobAdapter(run=run, latest_offset=lambda: read_head(log_dir), held_back_share=IngressMutedShare(log_dir),
                      state_size=Throttled(lambda: state_size(state_folder)), steps=tuple(STEPS))


def attach_monitor(spark, run: str, writer, cfg: "Config"):
    """Attach the product's monitor to the job's session (before the query starts), as any job's; return it."""
    return _attach(spark, run, writer, cfg.log_dir, cfg.shard_state_dir, cfg.state_dir)


def _attach(spark, run: str, writer, log_dir: Path, state_folder: Path, state_dir: Path):
    """The monitor with the job's adapter and writer.

    The job's process evaluates the alert rules itself (marketspread/runner.py), so the
    monitor does not; its task-sample spool is under the job's state folder.
    """
    from spark_listener.monitor import monitor  # lazy: pyspark, as above
    return monitor(spark, adapter=job_adapter(run, log_dir, state_folder), writer=writer, state_dir=state_dir,
                   spool_dir=state_dir / "task-samples", alerts=False)
