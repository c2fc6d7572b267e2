"""Reading through rollups gives exactly what the 1-s points give, from far fewer intervals."""
from __future__ import annotations

import time

import numpy as np

from collector.aggregate import IntervalAggregator
from collector.histogram import record_batch
from collector.influx import RP_ROLLUP
from collector.points import latency_point
from collector.samples import StepSample
from collector.query.store import MetricsStore
from collector.query.ranges import TimeRange
from collector.units import NS

RUN, STEP = "roll-1", "start-to-end"


def _write_run(client, start_ns: int, seconds: int, drop_rollup_at: int) -> None:
    """Write a run through the collector's aggregator; lose one 10-min rollup (as a restart would)."""
    rng = np.random.default_rng(7)
    agg = IntervalAggregator(RUN, born_ns=0)
    for i in range(seconds):
        for worker in ("h/p0", "h/p1"):
            values = rng.lognormal(np.log(3e5 * (1 + i / seconds)), 0.7, 50).astype(np.int64) + 1
            agg.add(StepSample("orders", STEP, worker, start_ns + i * NS + 3, record_batch(values)))
    points = [latency_point(ih) for ih in agg.drain(start_ns + (seconds + 7200) * NS)]
    kept = [p for p in points if not (p.rp == RP_ROLLUP and p.tags["interval"] == "10m"
                                      and p.time_ns == drop_rollup_at)]
    assert len(kept) == len(points) - (2 if drop_rollup_at >= 0 else 0)
    client.write(kept)


def test_rollups_give_the_exact_histogram_counts_and_read_fewer_intervals(influx_client):
    hour = 3600 * NS
    start = (time.time_ns() - 3 * hour) // hour * hour + 3590 * NS     # 10 s before an hour starts
    _write_run(influx_client, start, 1900, drop_rollup_at=start + 10 * NS + 600 * NS)
    store, raw_only = MetricsStore(influx_client), MetricsStore(influx_client)
    raw_only._rollups = False
    rng = TimeRange(start + 3 * NS + 500_000, start + 1897 * NS)      # ragged edges: seconds 4 .. 1896
    view, expected = store.step_view(RUN, STEP, rng, 60), raw_only.step_view(RUN, STEP, rng, 60)
    assert view.events == expected.events == 2 * 50 * 1893
    assert view.hist == expected.hist
    assert view.percentiles == expected.percentiles and view.bins == expected.bins
    assert view.throughput == expected.throughput
    assert [w.events for w in view.workers] == [w.events for w in expected.workers]
    blocks = store._blocks(RUN, rng, ("count",), 3600, step=STEP)
    assert sum(len(rows) for rows in blocks.values()) < 200 < 2 * 1893
    job = store.job_view(RUN, rng, 60)
    assert job.events == view.events and job.percentiles
    info = store.run(RUN, time.time_ns())
    assert info.events == 2 * 50 * 1900 and info.status == "finished"



def test_a_database_without_the_rollup_policy_reads_1s_points(influx_client):
    start = (time.time_ns() - 3600 * NS) // NS * NS
    _write_run(influx_client, start, 30, drop_rollup_at=-1)
    influx_client.query(f'DROP RETENTION POLICY "{RP_ROLLUP}" ON "{influx_client.config.db}"')
    store = MetricsStore(influx_client)
    view = store.step_view(RUN, STEP, TimeRange(start, start + 30 * NS), 1)
    assert view.events == 2 * 50 * 30 and not store._rollups
