"""Rules of every vocabulary evaluated end to end against the in-memory backend: no InfluxDB, no threads.

The same figures against a real InfluxDB: tests/collector/influx/test_reader_parity.py.
"""
from __future__ import annotations

import time

import pytest

from alerts.evaluate import FIRING, OK
from alerts.evaluator import AlertEvaluator
from alerts.history import AlertHistory
from alerts.query import MetricReader
from alerts.rules import Rule
from alerts.scope_names import check_rules
from alerts.store import RuleStore
from collector.metrics.backend import MetricsError
from collector.metrics.memory import MemoryBackend
from collector.metrics.views import FigureRequest
from collector.units import NS

from .memory_data import points

RULES = {
    # Market Spread's own grammar: latency, throughput, backlog, backpressure
    "orders-p99": ({"condition": "p99 > 1ms", "pipeline": "orders"}, FIRING),
    "nbbo-p99": ({"condition": "p99 > 1ms", "pipeline": "nbbo"}, OK),
    "slow-throughput": ({"condition": "throughput < 1M/s", "job": "ms"}, FIRING),
    "backlog": ({"condition": "backlog > 1k"}, FIRING),
    "backpressure": ({"condition": "backpressure > 50%", "job": "ms"}, FIRING),
    # any Spark query's figures
    "behind": ({"condition": "rows_behind > 1M", "job": "rates", "source": "0:KafkaV2"}, FIRING),
    "overrun": ({"condition": "batch_duration > trigger", "job": "slow"}, FIRING),
    "fast-overrun": ({"condition": "batch_duration > trigger", "job": "fast"}, OK),
    "heap": ({"condition": "heap_used > 1GB"}, FIRING),
    # a run as it stands
    "failed": ({"condition": "status = failed|lost"}, FIRING),
    "stalled": ({"condition": "batch_age > 20s", "job": "quiet"}, FIRING),
}


@pytest.fixture
def backend():
    b = MemoryBackend()
    now = time.time_ns()
    b.add(points(now))
    return b, now


def _rule(name: str, **kw) -> Rule:
    return Rule.from_dict({"name": name, "window": "1m", **kw})


def test_each_vocabulary_reads_its_figure(backend):
    b, now = backend
    read = lambda **kw: MetricReader(b).read(_rule("r", **kw), now)  # noqa: E731
    assert read(condition="p99 > 1ms", pipeline="orders").value == pytest.approx(2e6, rel=1e-3)
    assert read(condition="p50 >= 20us").value == pytest.approx(20e3, rel=1e-3)      # both pipelines merged
    assert read(condition="p99 > 1ms", job="nope").value is None
    # 1,000 events per pipeline and second; the window ends 5 s before now (SETTLE_S)
    assert read(condition="throughput < 10k/s", job="ms").value == pytest.approx(2000 * 5 / 60)
    assert read(condition="backlog > 1k").labels == {}                 # named by the rule's scope, as before
    assert read(condition="backpressure > 50%", job="ms").value == pytest.approx(0.6)
    behind = read(condition="rows_behind > 1M", job="rates")
    assert behind.value == 2_000_010 and behind.labels == {"job": "rates", "query": "rates"}
    assert read(condition="rows_behind < 1M", source="1:RateStreamV2").value == 10
    assert read(condition="batch_duration > trigger", job="slow").value == pytest.approx(0.8)   # start-up left out
    assert read(condition="max(batch_duration) > 1s", job="slow").value == 1500e6
    assert read(condition="p50(batch_duration) < 1s").value == 50e6                  # `<`: the lowest query
    assert read(condition="input_rate > processing_rate", job="rates").value == pytest.approx(0.7)
    assert read(condition="late_rows > 0", operator="0:stateStoreSave").value == 20
    assert read(condition="gc_time > 1s").value == 900e6                             # increase over the window
    assert read(condition="heap_used > 1GB").labels == {"app": "local-1", "executor": "1"}
    failed = read(condition="status = failed")
    assert failed.value == 1.0 and failed.labels == {"job": "dead", "query": "dead", "run_id": "d1"}
    assert read(condition="status = lost", job="quiet").value == 1.0
    assert read(condition="batch_age > 20s", job="quiet").value == 60.8 * NS        # its last batch ended 60.8 s ago


def test_one_cycle_fires_what_breaches_and_a_restart_restores_it(backend, tmp_path):
    b, now = backend
    store = RuleStore(tmp_path / "rules.json")
    store.put_all([_rule(name, **spec) for name, (spec, _) in RULES.items()])
    ev = AlertEvaluator(store, b, b, interval_s=3600)
    ev.evaluate_once(now)
    assert {name: ev.states[name].state for name in RULES} == {name: want for name, (_, want) in RULES.items()}
    assert not ev.errors
    # the history went through the backend's writer and reads back through its reader
    history = AlertHistory(b, ev.namespace)
    assert {name: e.state for name, e in history.current().items()} == {
        name: want for name, (_, want) in RULES.items() if want == FIRING}
    assert [e.state for e in history.events("backlog")] == [FIRING]
    again = AlertEvaluator(store, b, b, interval_s=3600)
    assert again.evaluate_once(now + NS) == []                   # restored: nothing announced twice
    assert again.states["backlog"].state == FIRING


def test_a_namespace_has_one_leading_evaluator(backend, tmp_path):
    b, now = backend
    store = RuleStore(tmp_path / "rules.json")
    store.put(_rule("backlog", condition="backlog > 1k"))
    first = AlertEvaluator(store, b, b, interval_s=1.0, lease=True)
    second = AlertEvaluator(store, b, b, interval_s=1.0, lease=True)
    first.evaluate_once(now)                                 # a candidate one cycle before the second
    for k in range(1, 4):
        first.evaluate_once(now + k * NS)
        second.evaluate_once(now + k * NS)
    assert first.leads and not second.leads and second.leader.id == first.lease.holder
    first.lease.release(now + 4 * NS)
    second.evaluate_once(now + 5 * NS)
    assert second.leads


def test_a_backend_that_does_not_answer_is_said_as_such(backend, tmp_path):
    b, now = backend
    store = RuleStore(tmp_path / "rules.json")
    store.put(_rule("backlog", condition="backlog > 1k", job="ms"))
    b.failing = MetricsError("connection refused")
    ev = AlertEvaluator(store, b, b, interval_s=3600)
    assert ev.evaluate_once(now) == []
    assert ev.errors == {"backlog": "metrics backend: connection refused"}
    notes = check_rules(b, store.rules())
    assert notes == ["rule 'backlog': job 'ms' not checked (the in-memory metrics backend is unreachable)"]


def test_rules_are_checked_against_the_names_the_backend_knows(backend):
    b, _ = backend
    with pytest.raises(ValueError, match="job 'slw' is unknown; did you mean 'slow'"):
        check_rules(b, [_rule("x", condition="rows_behind > 1M", job="slw")])
    with pytest.raises(ValueError, match="source '0:Kafka' is not a source of"):
        check_rules(b, [_rule("x", condition="rows_behind > 1M", job="rates", source="0:Kafka")])
    assert check_rules(b, [_rule("x", condition="p99 > 1ms", job="ms", pipeline="orders")]) == []
    note, = check_rules(b, [_rule("x", condition="state_rows > 1", job="rates")])
    assert "has no stateful operator" in note


def test_points_merge_as_influxdb_merges_them_and_rollups_are_not_read():
    b = MemoryBackend()
    b.add([Point_("runs", 5, status="running", seen=1), Point_("runs", 5, status="failed")])
    (row,) = b.points("runs")
    assert row.fields == {"status": "failed", "seen": 1}
    b.add([Point_("m", 1, v=1.0), Point_("m", 2, v=3.0)])
    b.add([Point_("m", 3, v=100.0)], rp="rollup")
    req = FigureRequest("m", "v", "mean", 0, 10, ("run",))
    assert [(s.tags, s.value) for s in b.read_figure(req)] == [({"run": "r"}, 2.0)]
    assert b.read_figure(FigureRequest("m", "v", "p50", 0, 10))[0].value == 1.0       # nearest rank, as InfluxQL
    assert b.read_figure(FigureRequest("m", "v", "increase", 0, 10))[0].value == 2.0


def Point_(measurement: str, t: int, **fields):
    from collector.metrics.point import Point
    return Point(measurement, {"run": "r"}, fields, t)
