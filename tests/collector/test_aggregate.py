"""Interval merging: emitted once closed, late samples re-emit, nothing lost or doubled."""
import numpy as np

from collector.aggregate import IntervalAggregator
from collector.histogram import record_batch
from collector.samples import StepSample

S = 1_000_000_000


def _sample(ts_ns, values, worker="w/p0"):
    return StepSample("orders", "start-to-end", worker, ts_ns, record_batch(np.asarray(values)))


def test_interval_emitted_after_grace_and_again_when_a_late_sample_arrives():
    agg = IntervalAggregator("r", interval_s=1.0, grace_s=2.0)
    agg.add(_sample(10 * S + 5, [1000, 2000]))
    agg.add(_sample(10 * S + 9 * S // 10, [3000]))
    assert agg.drain(12 * S) == []                     # closed at 11 s, grace until 13 s
    (ih,) = agg.drain(13 * S)
    assert (ih.start_ns, ih.hist.total_count) == (10 * S, 3)
    assert agg.drain(14 * S) == []                     # nothing changed: not emitted again
    agg.add(_sample(10 * S + 1, [4000]))               # a late batch for the same interval
    (late,) = agg.drain(14 * S)
    assert late.hist.total_count == 4                  # the whole interval, replacing the point


def test_final_drain_flushes_open_intervals_per_worker():
    agg = IntervalAggregator("r")
    agg.add(_sample(20 * S, [1, 2, 3], "w/p0"))
    agg.add(_sample(20 * S, [4], "w/p1"))
    out = agg.drain(20 * S, final=True)
    assert sorted((i.worker, i.hist.total_count) for i in out) == [("w/p0", 3), ("w/p1", 1)]
