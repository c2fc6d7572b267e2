"""Any streaming query's panels read from a real InfluxDB: runs, sources, batches, state, executors (exact figures)."""
from __future__ import annotations

import time

import pytest

from collector.query.ranges import TimeRange
from collector.query.spark_panels import executor_rank, parse_steps
from collector.query.store import MetricsStore
from collector.units import NS

from .generic_run import APP, EXECUTORS, OPERATORS, SOURCES, STEPS, generic_run


@pytest.fixture
def written(influx_client):
    """Two generic runs (one live, one finished with a different trigger) in a fresh database."""
    now = time.time_ns() // NS * NS
    live = generic_run("orders", now - 29 * NS, seed=3)
    done = generic_run("clicks", now - 3600 * NS, seconds=20, trigger_ms=500, steps=("a",), seed=4,
                       status="finished", app="local-other", sources=SOURCES[:1], operators=())
    influx_client.write(live.points + done.points)
    return MetricsStore(influx_client), live, done


def test_summaries_carry_each_runs_queries_rates_and_rows(written):
    store, live, done = written
    found = {s.run: s for s in store.query_summaries()}
    assert set(found) == {"orders", "clicks"} and found["orders"].run_id == "sr-3"
    s = found["orders"]
    assert s.first_ns == live.start_ns and s.last_ns == live.start_ns + 29 * NS
    assert s.last_end_ns == max(t + ms * 1_000_000 for t, ms, _ in live.batches) and s.rows == live.input_rows
    assert [q.query_id for q in s.queries] == [live.query_id] and s.queries[0].app_id == APP
    assert s.declared_steps == STEPS and s.queries[0].trigger_ms == 1000
    assert found["clicks"].queries[0].status == "finished" and found["clicks"].declared_steps == ("a",)
    assert [s.run for s in store.query_summaries(only="clicks")] == ["clicks"]


def test_runs_list_generic_runs_with_spark_throughput_and_last_step_p99(written):
    store, live, done = written
    runs = {r.run: r for r in store.runs(time.time_ns())}
    r = runs["orders"]
    assert r.throughput_eps == pytest.approx(live.last_minute_rate(), rel=1e-9) and r.throughput_unit == "rows/s"
    assert r.query_id == live.query_id and r.last_step == "sink" and r.steps[:3] == STEPS
    assert r.events == live.input_rows and r.live and r.status == "live" and r.app_id == APP
    hist = store.step_histogram("orders", "sink", TimeRange(live.start_ns, live.start_ns + 30 * NS))
    assert r.p99_ns == hist.value_at_percentile(99.0) and hist.total_count == live.step_counts["sink"]
    assert runs["clicks"].status == "finished" and not runs["clicks"].live
    assert store.run("orders", time.time_ns()).steps[:3] == STEPS


def test_a_run_without_latency_lists_with_no_step(influx_client):
    now = time.time_ns() // NS * NS
    g = generic_run("plain", now - 9 * NS, seconds=10, steps=(), latency=False)
    influx_client.write(g.points)
    store = MetricsStore(influx_client)
    (r,) = store.runs(time.time_ns())
    assert (r.run, r.p99_ns, r.last_step, r.steps) == ("plain", None, None, ())
    assert r.throughput_eps == pytest.approx(g.last_minute_rate(), rel=1e-9)
    assert store.job_view("plain", TimeRange(now - 60 * NS, now + NS), 1).events == 0


def test_sources_batches_state_and_executors_read_exactly(written):
    store, live, _ = written
    rng = TimeRange(live.start_ns, live.start_ns + 30 * NS)
    buckets = len({(live.start_ns + i * NS) // (10 * NS) for i in range(30)})     # 3, or 4 when not aligned
    src = store.source_view("orders", rng, 10)
    assert [s.source for s in src.latest] == list(SOURCES)
    assert src.latest[0].rows_behind == 129 and src.latest[1].files_behind == 3 and src.latest[1].rows_behind is None
    assert sum(s.rows for s in src.latest) == sum(p.fields["input_rows"] for p in live.points
                                                 if p.measurement == "spark_source")
    assert [s.name for s in src.input_rate] == list(SOURCES) and len(src.input_rate[0].values) == buckets
    assert [s.name for s in src.behind] == [SOURCES[0], f"{SOURCES[1]} files"]

    batches = store.query_batch_view("orders", rng, 10)
    assert (batches.batches, batches.overran, batches.judged, batches.trigger_ms) == (30, live.overran, 30, 1000)
    assert batches.share == live.overran / 30 and len(batches.overrun_share.values) == buckets

    state = store.state_view("orders", rng, 10)
    assert [o.operator for o in state.operators] == list(OPERATORS)
    assert [o.late_rows for o in state.operators] == [live.late_rows[o] for o in OPERATORS]
    assert state.operators[1].rows_total == 2029 and state.operators[0].memory_bytes == 50_029
    assert max(state.watermark_delay_ms.values) == 10_029

    ex = store.executor_view(APP, rng, 10)
    assert [e.executor for e in ex.latest] == list(EXECUTORS)
    assert ex.latest[2].heap_used_bytes == 102_000_028 and ex.latest[0].gc_time_ms == 280
    assert [s.name for s in ex.heap_used] == list(EXECUTORS)
    # gc_time_ms grows 10 ms per second of wall time: a GC rate of 10 ms/s between buckets
    assert set(ex.gc_ms_per_s[0].values) == {10.0} and set(ex.cpu_cores[0].values) == {0.5}
    assert store.executor_view("local-none", rng, 10).latest == []


def test_a_run_without_the_measurements_reads_as_empty(influx_client):
    store = MetricsStore(influx_client)
    rng = TimeRange(0, time.time_ns())
    assert store.source_view("nothing", rng, 10).latest == [] and store.query_batch_view("nothing", rng, 10).batches == 0
    assert store.state_view("nothing", rng, 10).operators == [] and store.query_summaries() == []


def test_step_order_is_the_declared_one_else_first_seen_and_market_spread_keeps_its_own(written):
    store, live, _ = written
    rng = TimeRange(live.start_ns, live.start_ns + 30 * NS)
    info = store.run("orders", time.time_ns())
    view = store.job_view("orders", rng, 1, order=info.steps, end_step=info.last_step)
    assert [s.label for s in view.steps] == list(STEPS)
    assert view.events == live.step_counts["sink"] and view.percentiles
    assert [b for b in store.steps("orders")] == list(STEPS)


def test_steps_and_names_parse_safely():
    assert parse_steps('["a", "b"]') == ("a", "b") and parse_steps("[1, null, \"x\"]") == ("x",)
    assert parse_steps("not json") == () and parse_steps('{"a": 1}') == () and parse_steps(None) == ()
    assert sorted(["10", "driver", "2", "x"], key=executor_rank) == ["driver", "2", "10", "x"]
