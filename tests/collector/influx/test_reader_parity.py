"""The InfluxDB reader and the in-memory backend give the alerts the same answers on the same points.

The memory backend is what unit tests of the alerts read (tests/alerts/test_memory_backend.py);
this runs each view on both, against a real InfluxDB, so those tests prove the product's behaviour.
"""
from __future__ import annotations

import time

import pytest

from alerts.history import AlertEvent, AlertHistory, NotificationRecord, event_point, notification_point
from alerts.namespace import AlertNamespace
from alerts.query import MetricReader
from alerts.rules import Rule
from collector.influx.reader import InfluxReader
from collector.metrics.memory import MemoryBackend
from collector.units import NS
from tests.alerts.memory_data import points

CONDITIONS = [
    {"condition": "p99 > 1ms", "pipeline": "orders"}, {"condition": "p50 >= 20us"}, {"condition": "p99.9 > 1ms"},
    {"condition": "throughput < 10k/s", "job": "ms"}, {"condition": "throughput < 10k/s", "pipeline": "nbbo"},
    {"condition": "backlog > 1k"}, {"condition": "backpressure > 50%", "job": "ms"},
    {"condition": "rows_behind > 1M"}, {"condition": "rows_behind < 1M", "source": "1:RateStreamV2"},
    {"condition": "batch_duration > trigger"}, {"condition": "batch_duration > trigger", "job": "fast"},
    {"condition": "input_rate > processing_rate", "job": "rates"}, {"condition": "max(batch_duration) > 1s"},
    {"condition": "p90(batch_duration) < 1s"}, {"condition": "last(state_rows) > 1k", "operator": "0:stateStoreSave"},
    {"condition": "late_rows > 0", "job": "slow"}, {"condition": "watermark_delay > 1s"},
    {"condition": "gc_time > 1s", "executor": "1"}, {"condition": "heap_used > 1GB"},
    {"condition": "status = failed|lost"}, {"condition": "status = lost", "job": "quiet"},
    {"condition": "batch_age > 20s"}, {"condition": "p99 > 1ms", "job": "nope"},
]


@pytest.fixture
def both(influx_client):
    now = time.time_ns()
    memory = MemoryBackend()
    memory.add(points(now))
    influx_client.write(points(now))
    return InfluxReader(influx_client), memory, now


@pytest.mark.parametrize("spec", CONDITIONS, ids=[" ".join(map(str, c.values())) for c in CONDITIONS])
def test_every_condition_reads_alike(both, spec):
    influx, memory, now = both
    rule = Rule.from_dict({"name": "r", "window": "1m", **spec})
    a, b = MetricReader(influx).read(rule, now), MetricReader(memory).read(rule, now)
    assert (a.value is None) == (b.value is None) and a.labels == b.labels
    assert a.value == pytest.approx(b.value)


def test_names_and_runs_read_alike(both):
    influx, memory, now = both
    assert influx.known_jobs() == memory.known_jobs()
    assert influx.tag_values("spark_source", "source", {"run": "rates"}) == memory.tag_values(
        "spark_source", "source", {"run": "rates"})
    assert influx.has_data("spark_state", "rows_total", {"run": "slow"}) and memory.has_data(
        "spark_state", "rows_total", {"run": "slow"})
    assert not influx.has_data("spark_state", "rows_total", {"run": "rates"})
    assert not memory.has_data("spark_state", "rows_total", {"run": "rates"})
    assert influx.steps("ms") == memory.steps("ms") == ["start-to-end"]
    assert influx.step_filters("ms", "start-to-end") == memory.step_filters("ms", "start-to-end")
    assert influx.queries_now(None, None, now) == memory.queries_now(None, None, now)


def test_history_and_lease_read_alike(both):
    influx, memory, now = both
    ns = AlertNamespace("ns-1", legacy=False)
    written = [event_point(AlertEvent("a", now - 3 * NS, "PENDING", "OK", 2.0, "p99 > 1ms"), "job r", ns),
               event_point(AlertEvent("a", now - 2 * NS, "FIRING", "PENDING", 3.0, "p99 > 1ms"), "job r", ns),
               event_point(AlertEvent("b", now - NS, "FIRING", "OK", None, "backlog > 1"), "", ns),
               notification_point(NotificationRecord("a", now - NS, "FIRING", 1, False, 500, "HTTP 500",
                                                     "http://h/x"), ns)]
    influx.client.write(written)
    memory.add(written)
    for reader in (influx, memory):
        reader.heartbeat("ns-1", "h:1:a", now - 5 * NS, False, now - NS)
        reader.heartbeat("ns-1", "h:2:b", now - 4 * NS, True, now - NS)
    views = [(lambda h: h.current()), (lambda h: h.events("a")), (lambda h: h.notifications(failed_only=True))]
    for view in views:
        assert view(AlertHistory(influx, ns)) == view(AlertHistory(memory, ns))
    assert influx.heartbeats("ns-1", now - 10 * NS) == memory.heartbeats("ns-1", now - 10 * NS)
