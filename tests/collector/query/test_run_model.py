"""Runs as Spark defines them, read from a real InfluxDB: a run per start, a query per id, names that never
merge, rows written before the ids were tagged, and every panel filtered to one run."""
from __future__ import annotations

import time

from collector.influx.lineproto import Point
from collector.query.ranges import TimeRange
from collector.query.run_groups import group_runs, pick_run, query_runs
from collector.query.store import MetricsStore
from collector.units import NS

from .run_rows import batches, runs_row, seconds_ago


def _untagged(points: list[Point]) -> list[Point]:
    """Return points as the listener wrote them before the ids were tags (`runs` rows keep their fields)."""
    return [p._replace(tags={k: v for k, v in p.tags.items() if k not in ("run_id", "query_id")}) for p in points]


def test_restarts_are_runs_of_one_query_and_alike_names_never_merge(influx_client):
    now = time.time_ns()
    t0, t1, t2 = seconds_ago(now, 300), seconds_ago(now, 120), seconds_ago(now, 30)
    influx_client.write([
        # one query restarted from its checkpoint: one query id, two run ids
        runs_row("orders", t0, "stopped", run_id="r1", end_ns=t0 + 10 * NS), *batches("orders", t0, 10, 5, run_id="r1"),
        runs_row("orders", t1, "stopped", run_id="r2", end_ns=t1 + 4 * NS), *batches("orders", t1, 4, 7, run_id="r2"),
        # `coll/a` and `coll_a` sanitise to one job; their query tags and ids differ
        runs_row("coll_a", t1, "stopped", query="coll/a", run_id="r3", end_ns=t1 + 3 * NS),
        *batches("coll_a", t1, 3, 2, query="coll/a", run_id="r3"),
        runs_row("coll_a", t2, query="coll_a", run_id="r4", last_seen_ns=now),
        *batches("coll_a", t2, 2, 9, query="coll_a", run_id="r4"),
    ])
    store = MetricsStore(influx_client)
    runs = store.runs(time.time_ns())
    by_id = {r.run_id: r for r in runs}
    assert set(by_id) == {"r1", "r2", "r3", "r4"}
    assert (by_id["r1"].events, by_id["r2"].events, by_id["r3"].events, by_id["r4"].events) == (50, 28, 6, 18)
    assert by_id["r1"].query_id == by_id["r2"].query_id == "qid-orders"
    groups = group_runs(runs)
    assert [(g.name, [r.run_id for r in g.runs]) for g in groups] == [
        ("coll_a", ["r4"]), ("orders", ["r2", "r1"]), ("coll/a", ["r3"])]
    # a run's page: its own batches only; the job's newest run without a run id
    jobs = store.job_runs("orders", time.time_ns())
    first = pick_run(jobs, "r1")
    assert [r.run_id for r in query_runs(jobs, first)] == ["r2", "r1"] and pick_run(jobs, None).run_id == "r2"
    assert pick_run(jobs, "no-such-run") is None
    whole = TimeRange(t0 - NS, now)
    assert store.query_batch_view(first.scope, whole, 10).batches == 10
    assert store.query_batch_view(by_id["r2"].scope, whole, 10).batches == 4
    assert store.query_batch_view("orders", whole, 10).batches == 14          # the job: every run
    assert sum(s.rows for s in store.source_view(first.scope, whole, 10).latest) == 50
    assert [m.kind for m in store.markers(first.scope, whole)] == ["start", "end"]


def test_unnamed_queries_of_one_application_are_two_entries(influx_client):
    now = time.time_ns()
    t0 = seconds_ago(now, 60)
    points = []
    for qid, rid, rows in (("8c1f2a90-aaaa", "ra", 3), ("51d07e33-bbbb", "rb", 11)):
        row = runs_row("my app", t0, query=qid, run_id=rid, last_seen_ns=now)
        points += [row._replace(fields={**row.fields, "query_id": qid})]
        points += [p._replace(tags={**p.tags, "query_id": qid}) for p in batches("my app", t0, 5, rows, query=qid,
                                                                                    run_id=rid)]
    influx_client.write(points)
    store = MetricsStore(influx_client)
    runs = store.runs(time.time_ns())
    groups = group_runs(runs)
    assert sorted(g.name for g in groups) == ["my app · 51d07e33", "my app · 8c1f2a90"]
    assert {r.run_id: r.events for r in runs} == {"ra": 15, "rb": 55}
    rb = pick_run(runs, "rb")
    assert store.query_batch_view(rb.scope, TimeRange(t0 - NS, now), 10).batches == 5
    assert sum(s.rows for s in store.source_view(rb.scope, TimeRange(t0 - NS, now), 10).latest) == 55


def test_rows_from_before_the_run_id_tag_open_as_their_runs(influx_client):
    """`runs` rows of one query in one series (no run_id tag): each is a run, its batches those of its span."""
    now = time.time_ns()
    t0, t1 = seconds_ago(now, 600), seconds_ago(now, 200)
    influx_client.write(_untagged([
        runs_row("old", t0, "stopped", run_id="o1", end_ns=t0 + 20 * NS), *batches("old", t0, 20, 4, run_id="o1"),
        runs_row("old", t1, "stopped", run_id="o2", end_ns=t1 + 6 * NS), *batches("old", t1, 6, 10, run_id="o2"),
        runs_row("single", t1, "finished", run_id="s1", end_ns=t1 + 3 * NS), *batches("single", t1, 3, 1, run_id="s1"),
    ]) + _untagged(batches("bare", t1, 2, 5)))        # batches and no `runs` row at all: one run, as before
    store = MetricsStore(influx_client)
    runs = store.runs(time.time_ns())
    got = {(r.run, r.run_id): (r.events, r.status) for r in runs}
    assert got == {("old", "o1"): (80, "stopped"), ("old", "o2"): (60, "stopped"), ("single", "s1"): (3, "finished"),
                   ("bare", None): (10, "finished")}
    o1 = pick_run(runs, "o1")
    assert o1.first_ns == t0 and o1.until_ns is not None and o1.until_ns <= t1
    assert [r.run_id for g in group_runs(runs) if g.job == "old" for r in g.runs] == ["o2", "o1"]
    whole = TimeRange(t0 - NS, now)
    assert store.query_batch_view(o1.scope, whole, 10).batches == 20
    assert store.query_batch_view(pick_run(runs, "o2").scope, whole, 10).batches == 6
    assert store.run("old", time.time_ns()).run_id == "o2"
    assert store.run("old", time.time_ns(), "o1").events == 80
