"""The job page's reads beside latency (ingress, Spark batches) against a real InfluxDB, and their pure parts."""
from __future__ import annotations

import time

from collector.influx import Point
from collector.query.panels import counter_growth
from collector.query.ranges import TimeRange
from collector.units import NS
from collector.query.store import MetricsStore


def test_counter_growth_survives_a_restart():
    assert counter_growth([(1, 5.0), (2, 7.0), (3, 2.0), (4, 4.0)], 3.0) == [(1, 2.0), (2, 2.0), (3, 2.0), (4, 2.0)]
    assert counter_growth([(1, 5.0)], None) == [(1, 5.0)]


def test_ingress_and_batch_reads(influx_client):
    run, t0 = "r-ing", (time.time_ns() // NS - 600) * NS
    points = []
    for i, (bad, muted, eps, trunc) in enumerate([(1, 0.0, 0, 1), (3, 0.5, 1, 2), (3, 1.5, 1, 2), (1, 1.5, 1, 0)]):
        points.append(Point("ingress", {"run": run}, {"bad": bad, "muted_seconds": muted, "mute_episodes": eps,
                                                      "accepted": 10}, t0 + i * NS))
        points.append(Point("ingress_bad", {"run": run, "reason": "truncated frame"}, {"frames": trunc},
                            t0 + i * NS))
    points += [Point("spark_progress", {"run": run, "query": "q"},
                     {"batch_ms": 100 + 10 * i, "addBatch_ms": 60, "queryPlanning_ms": 20 + i}, t0 + i * NS)
               for i in range(4)]
    influx_client.write(points)
    store = MetricsStore(influx_client)

    # from the second point on: growth over the point before the range; the 4th second is a restart (counts anew)
    view = store.ingress_view(run, TimeRange(t0 + NS, t0 + 4 * NS), 1)
    assert [s.name for s in view.bad_by_reason] == ["truncated frame"]
    assert view.bad_by_reason[0].values == (1.0, 0.0, 0.0)          # 1 -> 2, 2 -> 2, restart at 0
    assert view.bad_frames == 1
    assert view.muted_share.values == (0.5, 1.0, 0.0) and view.muted_s == 1.5 and view.mute_episodes == 1

    batches = store.batch_view(run, TimeRange(t0, t0 + 4 * NS), 1)
    assert batches.batches == 4 and batches.slowest_ms.values == (100.0, 110.0, 120.0, 130.0)
    assert [s.name for s in batches.phases_ms] == ["queryPlanning", "addBatch"]          # Spark's order
    assert store.batch_view("no-run", TimeRange(t0, t0 + 4 * NS), 1).batches == 0


def test_a_rescale_is_a_marker_of_its_run_in_range(influx_client):
    run, t0 = "r-rescale", (time.time_ns() // NS - 600) * NS
    influx_client.write([Point("job_rescale", {"run": run}, {"from_shards": 1, "to_shards": 4, "batch_id": 7,
                                                             "symbols": 300, "seconds": 0.02}, t0 + 5 * NS),
                         Point("job_rescale", {"run": "other"}, {"from_shards": 4, "to_shards": 2, "batch_id": 9,
                                                                 "symbols": 300, "seconds": 0.02}, t0 + 6 * NS)])
    store = MetricsStore(influx_client)
    got = store.markers(run, TimeRange(t0, t0 + 10 * NS))
    assert [(m.time_ns, m.kind, m.text) for m in got] == [(t0 + 5 * NS, "rescale", "rescaled 1 → 4 shards")]
    assert store.markers(run, TimeRange(t0 + 6 * NS, t0 + 10 * NS)) == []
    assert store.markers("no-run", TimeRange(t0, t0 + 10 * NS)) == []
