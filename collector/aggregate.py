"""Merge per-batch samples into wall-clock intervals and their rollups (driver side, off the hot path).

Samples of one interval arrive over several batches (a batch commits after its tasks
ran), so an interval is emitted once it has been closed for `grace_s`; a sample that
still comes later re-emits the whole interval (the InfluxDB point with the same tags and
time replaces the previous one). Emitting on every batch instead cost ~3x the points.

Every sample also goes into coarser *rollup* intervals (10 s, 1 min, 10 min, 1 h by
default), emitted the same way, so a dashboard reading a day merges ~50 histograms per
series instead of 86,400 (docs/METRICS.md, "Rollups"). A rollup interval must hold every
sample of its span or none: one that began before this aggregator existed (a restarted
job) or that was already forgotten is never emitted, and readers fall back to finer
intervals where a rollup is missing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from collector.histogram import LatencyHistogram, SparseCounts
from collector.samples import StepSample

#: Rollup interval lengths (s); each divides the next, so finer intervals tile coarser ones.
ROLLUP_INTERVALS_S = (10, 60, 600, 3600)


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
    rollup: bool = False            # a coarser copy of base intervals (written to the rollup policy)


class IntervalAggregator:
    """Fold `StepSample`s into `interval_s` buckets aligned to the wall clock, and into rollups.

    `rollups_s` are the rollup lengths (empty: none); `born_ns` is when this aggregator
    started seeing samples (default: now), before which it emits no rollup.
    """

    def __init__(self, run: str, interval_s: float = 1.0, retain_s: float = 120.0, grace_s: float = 2.0,
                 rollups_s: tuple[float, ...] = ROLLUP_INTERVALS_S, born_ns: int | None = None):
        self.run = run
        self.interval_ns = int(interval_s * 1e9)
        self.grace_ns = int(grace_s * 1e9)
        self.retain_ns = int(retain_s * 1e9)
        self.rollups_ns = tuple(int(r * 1e9) for r in rollups_s if int(r * 1e9) > self.interval_ns)
        born = time.time_ns() if born_ns is None else born_ns
        # per rollup length: the earliest interval start it may still emit whole
        self._floor = {r: born for r in self.rollups_ns}
        self._open: dict[tuple[str, str, str, int, int], LatencyHistogram] = {}
        self._dirty: set[tuple[str, str, str, int, int]] = set()

    def _merge(self, key: tuple[str, str, str, int, int], sample: StepSample) -> None:
        hist = self._open.get(key)
        if hist is None:
            hist = self._open[key] = LatencyHistogram()
        elif isinstance(hist, SparseCounts):         # emitted, kept small: a late sample re-opens it
            hist = self._open[key] = LatencyHistogram.from_sparse(hist)
        hist.add_sparse(sample.counts)
        self._dirty.add(key)

    def add(self, sample: StepSample) -> None:
        """Merge one sample into its interval and its rollups."""
        ts = sample.ts_ns
        self._merge((sample.pipeline, sample.step, sample.worker, ts - ts % self.interval_ns, self.interval_ns),
                    sample)
        for r in self.rollups_ns:
            start = ts - ts % r
            if start >= self._floor[r]:
                self._merge((sample.pipeline, sample.step, sample.worker, start, r), sample)

    def oldest_pending(self) -> int | None:
        """Start (ns) of the oldest base interval holding samples not yet drained, if any."""
        starts = [k[3] for k in self._dirty if k[4] == self.interval_ns]
        return min(starts) if starts else None

    def drain(self, now_ns: int, final: bool = False) -> list[IntervalHistogram]:
        """Return changed intervals closed for the grace time (all with `final`); forget old ones.

        Base intervals come first, then rollups; a final drain emits no unfinished rollup.
        """
        def closed(k):
            return k[3] + k[4] + self.grace_ns <= now_ns
        ready = sorted((k for k in self._dirty if closed(k) or (final and k[4] == self.interval_ns)),
                       key=lambda k: (k[4], k[3]))
        out = [IntervalHistogram(self.run, p, s, w, start, size, self._open[(p, s, w, start, size)],
                                 size != self.interval_ns)
               for (p, s, w, start, size) in ready]
        self._dirty.difference_update(ready)
        # An emitted interval is kept for late samples as sparse counts (a few KB, not a
        # dense 270 KB histogram: 120 s of them for every series held ~0.5 GB).
        for ih in out:
            self._open[(ih.pipeline, ih.step, ih.worker, ih.start_ns, ih.interval_ns)] = ih.hist.to_sparse()
        for key in [k for k in self._open if k[3] + k[4] + self.retain_ns < now_ns]:
            del self._open[key]
            if key[4] in self._floor:       # a late sample must not re-open a forgotten rollup
                self._floor[key[4]] = max(self._floor[key[4]], key[3] + key[4])
        return out
