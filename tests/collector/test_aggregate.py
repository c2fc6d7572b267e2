"""Interval merging: emitted once closed, late samples re-emit, nothing lost or doubled."""
import time

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


def test_rollups_hold_every_sample_of_their_span_and_go_to_the_rollup_policy():
    from collector.influx import RP_ROLLUP
    from collector.points import latency_point
    agg = IntervalAggregator("r", rollups_s=(10, 60), born_ns=0)
    for second in range(60, 125):                       # 65 s: [60 s, 125 s)
        agg.add(_sample(second * S + 7, [1000 * second]))
    out = agg.drain(200 * S)
    base = [i for i in out if not i.rollup]
    tens = [i for i in out if i.rollup and i.interval_ns == 10 * S]
    minute, rest = [i for i in out if i.rollup and i.interval_ns == 60 * S]
    assert (rest.start_ns, rest.hist.total_count) == (120 * S, 5)
    assert len(base) == 65 and sum(i.hist.total_count for i in base) == 65
    assert [i.start_ns for i in tens] == [t * S for t in range(60, 121, 10)]
    assert [i.hist.total_count for i in tens] == [10] * 6 + [5]
    assert (minute.start_ns, minute.hist.total_count) == (60 * S, 60)
    assert minute.hist.max >= 119_000 and minute.hist.min <= 60_100
    p = latency_point(minute)
    assert (p.rp, p.tags["interval"], p.fields["count"]) == (RP_ROLLUP, "1m", 60)
    assert latency_point(base[0]).rp is None and "interval" not in latency_point(base[0]).tags


def test_no_rollup_that_began_before_the_aggregator_or_is_unfinished_at_the_end():
    agg = IntervalAggregator("r", rollups_s=(10,), born_ns=15 * S)
    for second in range(12, 27):
        agg.add(_sample(second * S, [5]))
    out = agg.drain(27 * S, final=True)
    # [10, 20) began before the aggregator: a restarted job never saw all of it; [20, 30) is open
    assert [i for i in out if i.rollup] == []
    assert sum(i.hist.total_count for i in out) == 15
    agg = IntervalAggregator("r", rollups_s=(10,), born_ns=15 * S)
    for second in range(20, 31):
        agg.add(_sample(second * S, [5]))
    assert [(i.start_ns, i.hist.total_count) for i in agg.drain(33 * S) if i.rollup] == [(20 * S, 10)]


def test_a_sample_later_than_retention_does_not_reopen_a_rollup():
    agg = IntervalAggregator("r", rollups_s=(10,), retain_s=5, born_ns=0)
    for second in range(10, 20):
        agg.add(_sample(second * S, [5]))
    assert [i.hist.total_count for i in agg.drain(40 * S) if i.rollup] == [10]
    agg.add(_sample(15 * S, [5]))                      # forgotten: re-emitting would replace 10 with 1
    assert [i for i in agg.drain(60 * S) if i.rollup] == []


def test_memory_writer_and_client_route_points_by_their_policy(influx_client):
    from collector.influx import RP_ROLLUP, Point
    from collector.testing import MemoryWriter
    t = time.time_ns() // S * S
    pts = [Point("m", {"k": "a"}, {"v": 1}, t), Point("m", {"k": "a"}, {"v": 2}, t, RP_ROLLUP)]
    w = MemoryWriter()
    w.add(pts)
    assert [p.fields["v"] for p in w.by_rp[None]] == [1] and [p.fields["v"] for p in w.by_rp[RP_ROLLUP]] == [2]
    assert influx_client.write(pts) == 2
    raw = influx_client.query('SELECT "v" FROM "m"')
    rolled = influx_client.query(f'SELECT "v" FROM "{RP_ROLLUP}"."m"')
    assert raw[0].values == [[t, 1]] and rolled[0].values == [[t, 2]]


def test_a_server_without_the_rollup_policy_still_gets_the_1s_points(influx_client, tmp_path):
    from collector.influx import RP_ROLLUP, InfluxClient, InfluxWriter, Point
    from dataclasses import replace
    db = influx_client.config.db
    influx_client.query(f'DROP RETENTION POLICY "{RP_ROLLUP}" ON "{db}"')
    # a user who may write but not create the policy: the rollups are rejected, the 1-s points flow
    influx_client.query("CREATE USER \"t_writer\" WITH PASSWORD 't-writer-pw'")
    influx_client.query(f'GRANT WRITE ON "{db}" TO "t_writer"')
    t = time.time_ns() // S * S
    try:
        writer_only = InfluxClient(replace(influx_client.config, user="t_writer", password="t-writer-pw"))
        with InfluxWriter(writer_only, tmp_path / "spool") as w:
            for i in range(3):
                w.add([Point("m", {"k": "a"}, {"v": i}, t + i * S), Point("m", {"k": "a"}, {"v": i}, t, RP_ROLLUP)])
                assert w.flush(10)
            st = w.stats()
    finally:
        influx_client.query('DROP USER "t_writer"')
    assert influx_client.query('SELECT count("v") FROM "m"')[0].values[0][1] == 3
    assert st.points_rejected == 3 and st.points_spooled == 0 and st.points_written == 3
    # one who may (the admin): the policy is created and the rollups land too
    with InfluxWriter(influx_client, tmp_path / "spool") as w:
        w.add(Point("m", {"k": "a"}, {"v": 9}, t, RP_ROLLUP))
        assert w.flush(10)
        assert w.stats().points_written == 1
    assert influx_client.query(f'SELECT "v" FROM "{RP_ROLLUP}"."m"')[0].values == [[t, 9]]
