"""Rules that catch a dead job, against a real InfluxDB: `batch_age`, `status = failed|lost`, and
what a rule does while its query reports nothing (the no-data policy)."""
from __future__ import annotations

import time

import pytest

from alerts.evaluate import FIRING, OK, PENDING, RESOLVED
from alerts.evaluator import AlertEvaluator
from alerts.query import MetricReader
from alerts.rules import Rule, parse_condition
from collector.metrics.views import QueryNow, status_now
from alerts.store import RuleStore
from collector.influx import Point
from collector.run_status import LOST_AFTER_S
from collector.testing import MemoryWriter
from collector.units import NS


def _run_row(job: str, run_id: str, start: int, status: str, seen: int | None = None, query: str | None = None,
             **fields) -> Point:
    f = {"status": status, "start_ns": start, "query_id": "q-" + job, "spark_run_id": run_id, **fields}
    if seen is not None:
        f["last_seen_ns"] = seen
    return Point("runs", {"run": job, "query": query or job, "run_id": run_id}, f, start)


def _batch(job: str, t: int, batch_ms: int = 200, trigger_ms: int | None = 1000, run_id: str = "") -> Point:
    f = {"batch_id": t // NS, "batch_ms": batch_ms}
    if trigger_ms is not None:
        f.update(trigger_ms=trigger_ms, overran=int(batch_ms > trigger_ms))
    return Point("spark_progress", {"run": job, "query": job, "run_id": run_id}, f, t)


def _rule(**kw) -> Rule:
    return Rule.from_dict({"name": "r", **kw})


def test_batch_age_is_the_time_since_the_last_batch_of_a_query_not_stopped_on_purpose(influx_client):
    now = time.time_ns()
    influx_client.write([
        _run_row("dead", "r1", now - 300 * NS, "running", seen=now - 100 * NS),       # its driver died 100 s ago
        _batch("dead", now - 101 * NS, batch_ms=500),
        _run_row("alive", "r2", now - 300 * NS, "running", seen=now - 2 * NS),
        _batch("alive", now - 3 * NS, batch_ms=1000),
        _run_row("stopped", "r3", now - 300 * NS, "stopped", seen=now - 50 * NS),     # stopped on purpose
        _batch("stopped", now - 60 * NS),
        _batch("old-monitor", now - 40 * NS, batch_ms=0),                             # no runs rows at all
    ])
    read = lambda **kw: MetricReader(influx_client).read(_rule(condition="batch_age > 20s", **kw), now)  # noqa: E731
    dead = read(job="dead")
    assert dead.value == pytest.approx(100.5 * NS, rel=1e-6)
    assert dict(dead.labels) == {"job": "dead", "query": "dead", "run_id": "r1"}
    assert read(job="alive").value == pytest.approx(2 * NS, rel=1e-6)
    assert read(job="stopped").value is None                      # not dead: no data
    assert read(job="old-monitor").value == pytest.approx(40 * NS, rel=1e-6)
    worst = read()
    assert worst.value == pytest.approx(100.5 * NS, rel=1e-6) and worst.labels["job"] == "dead"
    assert read(job="no-such-job").value is None


def test_a_restart_resets_batch_age_to_the_new_runs_start(influx_client):
    now = time.time_ns()
    influx_client.write([
        _run_row("job", "old", now - 600 * NS, "failed", seen=now - 500 * NS, error="RuntimeError: boom"),
        _batch("job", now - 500 * NS),
        _run_row("job", "new", now - 4 * NS, "running", seen=now - 4 * NS),        # no batch yet
    ])
    got = MetricReader(influx_client).read(_rule(condition="batch_age > 20s"), now)
    assert got.value == pytest.approx(4 * NS, rel=1e-6) and got.labels["run_id"] == "new"


def test_status_rules_see_the_newest_run_of_each_query_failed_or_lost(influx_client):
    now = time.time_ns()
    influx_client.write([
        _run_row("crashed", "a1", now - 100 * NS, "failed", seen=now - 90 * NS, error="RuntimeError: boom"),
        _run_row("killed", "b1", now - 100 * NS, "running", seen=now - int((LOST_AFTER_S + 5) * NS)),
        _run_row("healthy", "c1", now - 100 * NS, "running", seen=now - 1 * NS),
        _run_row("restarted", "d1", now - 300 * NS, "failed", seen=now - 250 * NS),
        _run_row("restarted", "d2", now - 100 * NS, "running", seen=now - 1 * NS),
    ])
    read = lambda cond, **kw: MetricReader(influx_client).read(_rule(condition=cond, **kw), now)  # noqa: E731
    assert read("status = failed", job="crashed").value == 1.0
    assert read("status = failed", job="crashed").labels["run_id"] == "a1"
    assert read("status = lost", job="crashed").value == 0.0
    assert read("status = lost", job="killed").value == 1.0
    assert read("status = failed|lost", job="healthy").value == 0.0
    assert read("status = failed", job="restarted").value == 0.0           # its newest run is up again
    assert read("status = failed|lost").value == 1.0                        # any job of the database
    assert read("status = failed", job="nobody").value is None


def test_a_running_row_without_heartbeats_is_never_lost():
    q = QueryNow("j", "j", "", "running", None, 5, None)                   # a row of an older monitor
    assert status_now(q, 10**19) == "running"


def _evaluator(tmp_path, client, rule: Rule) -> tuple[AlertEvaluator, MemoryWriter]:
    store = RuleStore(tmp_path / "alerts" / "rules.json")
    store.put(rule)
    sink = MemoryWriter()
    return AlertEvaluator(store, client, sink, interval_s=1.0), sink


@pytest.mark.parametrize("nodata, after", [("keep", FIRING), ("ok", RESOLVED), ("alerting", FIRING)])
def test_a_firing_rule_whose_query_stops_reporting_follows_its_nodata_policy(tmp_path, influx_client, nodata, after):
    now = time.time_ns()
    influx_client.write([_batch("job", now - (10 - i) * NS, batch_ms=1500) for i in range(10)])
    ev, _ = _evaluator(tmp_path, influx_client, _rule(condition="batch_duration > trigger", job="job", window="30s",
                                                      nodata=nodata))
    ev.evaluate_once(now)
    assert ev.states["r"].state == FIRING
    later = now + 60 * NS                                                   # the job died: nothing in the window
    ev.evaluate_once(later)
    assert ev.states["r"].state == after
    assert ev.no_data_since["r"] == later
    ev.evaluate_once(later + 600 * NS)
    assert ev.states["r"].state == (OK if nodata == "ok" else FIRING)


def test_nodata_alerting_fires_a_rule_whose_query_never_reported_after_its_for(tmp_path, influx_client):
    now = time.time_ns()
    ev, _ = _evaluator(tmp_path, influx_client, _rule(condition="rows_behind > 1M", job="j", nodata="alerting",
                                                      **{"for": "10s"}))
    ev.evaluate_once(now)
    assert ev.states["r"].state == PENDING
    ev.evaluate_once(now + 11 * NS)
    assert ev.states["r"].state == FIRING


def test_a_status_rule_fires_on_a_failed_run_and_resolves_when_the_query_runs_again(tmp_path, influx_client):
    now = time.time_ns()
    influx_client.write([_run_row("job", "r1", now - 100 * NS, "failed", seen=now - 50 * NS,
                                  error="RuntimeError: boom")])
    ev, _ = _evaluator(tmp_path, influx_client, _rule(condition="status = failed", job="job"))
    ev.evaluate_once(now)
    assert ev.states["r"].state == FIRING
    assert ev.series["r"] == {"job": "job", "query": "job", "run_id": "r1"}
    influx_client.write([_run_row("job", "r2", now + 1 * NS, "running", seen=now + 1 * NS)])
    ev.evaluate_once(now + 2 * NS)
    assert ev.states["r"].state == RESOLVED


def test_a_runs_start_up_batch_trips_no_batch_rule(influx_client):
    now = time.time_ns()
    start = Point("spark_progress", {"run": "job", "query": "job", "phase": "startup"},
                  {"batch_id": 0, "batch_ms": 5600, "trigger_ms": 1000, "overran": 1}, now - 10 * NS)
    influx_client.write([start] + [_batch("job", now - (9 - i) * NS, batch_ms=300) for i in range(3)])
    read = lambda cond: MetricReader(influx_client).value(_rule(condition=cond, job="job"), now)  # noqa: E731
    assert read("batch_duration > trigger") == 0.0                      # 0 of 3 steady batches overran
    assert read("max(batch_duration) > 5s") == pytest.approx(300e6)
    assert read("overrun_share > 10%") == 0.0
    influx_client.write([_batch("job", now - 5 * NS, batch_ms=4000)])  # a slow batch later in the run counts
    assert read("max(batch_duration) > 5s") == pytest.approx(4000e6)


def test_conditions_name_the_figures_and_statuses():
    assert parse_condition("batch_age > 20s").threshold == 20 * NS
    assert parse_condition("status = failed|lost").statuses == ("failed", "lost")
    for bad, says in (("status = dead", "unknown"), ("max(batch_age) > 1s", "as it stands now"),
                      ("batch_age > trigger", "not batch by batch"), ("status > 1", "status = failed")):
        with pytest.raises(ValueError, match=says):
            parse_condition(bad)
    with pytest.raises(ValueError, match="scope it with job and query"):
        _rule(condition="status = failed", step="enrich")
    with pytest.raises(ValueError, match="nodata"):
        _rule(condition="p99 > 5ms", nodata="sometimes")
    assert _rule(condition="p99 > 5ms", nodata="ok").to_dict()["nodata"] == "ok"
    assert "nodata" not in _rule(condition="p99 > 5ms").to_dict()
