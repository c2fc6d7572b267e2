"""How runs ended, read from a real InfluxDB: failed with its reason, stopped, finished, lost, live; older rows;
and the runs page's and the sources table's rates over their windows."""
from __future__ import annotations

import time

import pytest

from collector.query.ranges import TimeRange
from collector.query.run_ends import RunError
from collector.query.store import MetricsStore
from collector.run_status import LOST_AFTER_S
from collector.units import NS
from tests.metrics_ui.conftest import make_points

from .run_rows import batches, runs_row, seconds_ago

TRACE = '  File "/home/u/job.py", line 41, in enrich\n  File "/home/u/job.py", line 12, in parse'


def _runs(client) -> dict:
    """Return each job's newest run."""
    out: dict = {}
    for r in MetricsStore(client).runs(time.time_ns()):
        out.setdefault(r.run, r)
    return out


def test_each_runs_end_is_read_from_its_newest_row(influx_client):
    now = time.time_ns()
    t0 = seconds_ago(now, 300)
    points = [
        runs_row("failing", t0, "failed", end_ns=t0 + 20 * NS, last_seen_ns=t0 + 20 * NS, error_class="RuntimeError",
                 error_message="boom in batch 15", error="RuntimeError: boom in batch 15", error_trace=TRACE),
        *batches("failing", t0, 15, 100),
        runs_row("halted", t0, "stopped", end_ns=t0 + 30 * NS, last_seen_ns=t0 + 30 * NS),
        *batches("halted", t0, 25, 100),
        runs_row("drained", t0, "finished", end_ns=t0 + 12 * NS), *batches("drained", t0, 10, 100),
        # the driver was killed: a running row whose heartbeat and batches stopped a while ago
        runs_row("killed", t0, last_seen_ns=seconds_ago(now, LOST_AFTER_S + 40)),
        *batches("killed", t0, 5, 100),
        # a slow trigger: no batch for two minutes, but the monitor's heartbeat is fresh
        runs_row("slow", t0, last_seen_ns=seconds_ago(now, 2)), *batches("slow", t0, 3, 100),
    ]
    influx_client.write(points)
    runs = _runs(influx_client)
    failed = runs["failing"]
    assert (failed.status, failed.ended_ns, failed.live) == ("failed", t0 + 20 * NS, False)
    assert failed.error == RunError("RuntimeError", "boom in batch 15", tuple(TRACE.splitlines()))
    assert (runs["halted"].status, runs["halted"].ended_ns, runs["halted"].error) == ("stopped", t0 + 30 * NS, None)
    assert runs["drained"].status == "finished" and runs["drained"].ended_ns == t0 + 12 * NS
    lost = runs["killed"]
    assert (lost.status, lost.seen_ns, lost.ended_ns, lost.live) == \
        ("lost", seconds_ago(now, LOST_AFTER_S + 40), None, False)
    assert runs["slow"].status == "live" and runs["slow"].live
    # one run's page reads the same
    assert MetricsStore(influx_client).run("failing", time.time_ns()).error.error_class == "RuntimeError"


def test_rows_from_before_heartbeats_and_split_errors_still_read(influx_client):
    """Only the fields the monitor wrote before: `error` with py4j's class, no heartbeat, no end of a killed run."""
    now = time.time_ns()
    t0 = seconds_ago(now, 3600)
    old_error = "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query [id = 1] failed"
    influx_client.write([
        runs_row("old-failed", t0, "failed", end_ns=t0 + 9 * NS, error=old_error), *batches("old-failed", t0, 9, 10),
        runs_row("old-done", t0, "finished", end_ns=t0 + 9 * NS), *batches("old-done", t0, 9, 10),
        runs_row("old-killed", t0), *batches("old-killed", t0, 9, 10),
        runs_row("old-live", seconds_ago(now, 20)), *batches("old-live", seconds_ago(now, 20), 20, 10),
    ])
    runs = _runs(influx_client)
    assert runs["old-failed"].status == "failed"
    assert runs["old-failed"].error == RunError("pyspark.errors.exceptions.captured.StreamingQueryException",
                                                "[STREAM_FAILED] Query [id = 1] failed")
    assert runs["old-done"].status == "finished" and runs["old-killed"].status == "lost"
    assert runs["old-live"].status == "live"


def test_a_restarted_query_is_two_runs_and_two_queries_of_one_job_are_two_entries(influx_client):
    now = time.time_ns()
    t0, t1 = seconds_ago(now, 600), seconds_ago(now, 20)
    influx_client.write([
        runs_row("again", t0, "failed", run_id="r1", end_ns=t0 + 5 * NS, error_class="E", error_message="first"),
        runs_row("again", t1, run_id="r2", last_seen_ns=seconds_ago(now, 1)), *batches("again", t1, 5, 10, run_id="r2"),
        runs_row("pair", t0, "stopped", query="a", end_ns=t0 + 9 * NS),
        runs_row("pair", t0, "failed", query="b", end_ns=t0 + 8 * NS, error_class="ValueError", error_message="bad"),
        *batches("pair", t0, 8, 10, query="a"),
    ])
    runs = MetricsStore(influx_client).runs(time.time_ns())
    again = [(r.run_id, r.status, r.error.short if r.error else None) for r in runs if r.run == "again"]
    assert again == [("r2", "live", None), ("r1", "failed", "E: first")]
    pair = {r.query: (r.status, r.error.short if r.error else None) for r in runs if r.run == "pair"}
    assert pair == {"a": ("stopped", None), "b": ("failed", "ValueError: bad")}


def test_market_spread_runs_keep_their_status_from_their_points(influx_client):
    now = time.time_ns() // NS * NS
    live, _ = make_points("ms-live", now - 29 * NS, 30, seed=1)
    done, _ = make_points("ms-done", now - 3600 * NS, 10, seed=2)
    # Market Spread's own `runs` row: running, from a monitor without heartbeats, while its latency flows
    row = runs_row("ms-running", now - 40 * NS, query="market_spread")
    flowing, _ = make_points("ms-running", now - 29 * NS, 30, seed=3)
    influx_client.write(live + done + flowing + [row])
    runs = _runs(influx_client)
    assert (runs["ms-live"].status, runs["ms-live"].live, runs["ms-live"].throughput_unit) == ("live", True, "events/s")
    assert runs["ms-done"].status == "finished" and not runs["ms-done"].live
    assert runs["ms-running"].status == "live" and runs["ms-running"].throughput_unit == "events/s"


def test_throughput_is_the_rows_of_the_last_minute_of_batches_over_60_s(influx_client):
    """Three minutes of batches whose sizes change: the figure is the last minute's rows / 60 s, within 1 %."""
    now = time.time_ns()
    t0 = seconds_ago(now, 180)
    sizes = [1000 + 37 * (i % 11) + (2000 if i >= 150 else 0) for i in range(180)]   # the last 30 s bigger
    influx_client.write([runs_row("steady", t0, last_seen_ns=seconds_ago(now, 1)),
                         *batches("steady", t0, 180, sizes, batch_ms=500)])
    end = t0 + 179 * NS + 500 * 1_000_000
    expected = sum(n for i, n in enumerate(sizes) if t0 + i * NS >= end - 60 * NS) / 60
    got = _runs(influx_client)["steady"].throughput_eps
    assert got == pytest.approx(expected, rel=0.01)
    assert abs(got - sizes[-1] * 7.0) > 0.05 * got           # not the newest batch's inputRowsPerSecond


def test_a_run_shorter_than_a_minute_is_taken_over_its_length(influx_client):
    now = time.time_ns()
    t0 = seconds_ago(now, 20)
    influx_client.write([runs_row("short", t0, last_seen_ns=seconds_ago(now, 1)),
                         *batches("short", t0, 10, 300, every_ms=2000, batch_ms=1000)])
    # 10 batches, the first starting at t0, the last ending 19 s later
    assert _runs(influx_client)["short"].throughput_eps == pytest.approx(3000 / 19, rel=1e-9)


def test_the_sources_rates_are_over_the_range(influx_client):
    now = time.time_ns()
    t0 = seconds_ago(now, 120)
    influx_client.write([runs_row("src", t0), *batches("src", t0, 100, [100 + i for i in range(100)], batch_ms=250)])
    rng = TimeRange(t0 + 10 * NS, t0 + 50 * NS)              # batches 10 .. 49
    rows = sum(100 + i for i in range(10, 50))
    (s,) = MetricsStore(influx_client).source_view("src", rng, 10).latest
    assert (s.rows, s.rows_behind) == (rows, 49)
    assert s.input_rows_per_s == pytest.approx(rows / 40, rel=1e-9)
    assert s.processed_rows_per_s == pytest.approx(rows / (40 * 0.25), rel=1e-9)
    span = TimeRange(t0 + 10 * NS, t0 + 30 * NS)
    (s,) = MetricsStore(influx_client).source_view("src", rng, 10, span=span).latest
    assert s.input_rows_per_s == pytest.approx(rows / 20, rel=1e-9)
