"""Merge per-batch samples into wall-clock intervals (driver side, off the hot path).

Samples of one interval arrive over several batches (a batch commits after its tasks
ran), so an interval is emitted once it has been closed for `grace_s`; a sample that
still comes later re-emits the whole interval (the InfluxDB point with the same tags and
time replaces the previous one). Emitting on every batch instead cost ~3x the points.
"""
from __future__ import annotations

from dataclasses import dataclass

from .histogram import LatencyHistogram
from .samples import StepSample


@dataclass(frozen=True)
class IntervalHistogram:
    """All of one step's latencies on one pipeline and worker within one interval."""
    run: str
    pipeline: str
    step: str
    worker: str
    start_ns: int
    interval_ns: int
    hist: LatencyHistogram


class IntervalAggregator:
    """Fold `StepSample`s into `interval_s` buckets aligned to the wall clock."""

    def __init__(self, run: str, interval_s: float = 1.0, retain_s: float = 120.0, grace_s: float = 2.0):
        self.run = run
        self.interval_ns = int(interval_s * 1e9)
        self.grace_ns = int(grace_s * 1e9)
        self.retain_ns = int(retain_s * 1e9)
        self._open: dict[tuple[str, str, str, int], LatencyHistogram] = {}
        self._dirty: set[tuple[str, str, str, int]] = set()

    def add(self, sample: StepSample) -> None:
        """Merge one sample into its interval."""
        start = sample.ts_ns - sample.ts_ns % self.interval_ns
        key = (sample.pipeline, sample.step, sample.worker, start)
        hist = self._open.get(key)
        if hist is None:
            hist = self._open[key] = LatencyHistogram()
        hist.add_sparse(sample.counts)
        self._dirty.add(key)

    def drain(self, now_ns: int, final: bool = False) -> list[IntervalHistogram]:
        """Return changed intervals closed for the grace time (all with `final`); forget old ones."""
        ready = sorted((k for k in self._dirty if final or k[3] + self.interval_ns + self.grace_ns <= now_ns),
                       key=lambda k: k[3])
        out = [IntervalHistogram(self.run, p, s, w, start, self.interval_ns, self._open[(p, s, w, start)].copy())
               for (p, s, w, start) in ready]
        self._dirty.difference_update(ready)
        horizon = now_ns - self.retain_ns
        for key in [k for k in self._open if k[3] < horizon]:
            del self._open[key]
        return out
