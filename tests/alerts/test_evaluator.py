"""The evaluator's cycle against a real InfluxDB: every metric kind, scope, mute, delete, bad file, outage."""
from __future__ import annotations

import time

import numpy as np
import pytest

from alerts.evaluate import FIRING, OK, PENDING, RESOLVED
from alerts.evaluator import AlertEvaluator
from alerts.history import ALERT_EVENTS
from alerts.notify import WebhookNotifier
from alerts.rules import Rule
from alerts.store import RuleStore
from alerts.webhook_target import WebhookPolicy
from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient, InfluxConfig, Point
from collector.points import latency_point
from collector.testing import MemoryWriter
from collector.units import NS

from .webhook_server import WebhookReceiver



def _write_run(client, run: str, now: int) -> None:
    """Ten seconds of a run: orders ~2 ms, nbbo ~20 µs start-to-end; backlog and backpressure."""
    points = []
    for i in range(10):
        t = now - (10 - i) * NS
        for pipeline, latency in (("orders", 2_000_000), ("nbbo", 20_000)):
            hist = LatencyHistogram.from_values(np.full(1000, latency))
            points.append(latency_point(IntervalHistogram(run, pipeline, "start-to-end", "h/p0", t, NS, hist)))
        points.append(Point("backpressure", {"run": run, "step": "job"},
                            {"backlog": 5000, "backpressured_share": 0.6, "status": "HIGH"}, t))
    client.write(points)


def _rule(**kw) -> Rule:
    return Rule.from_dict({"window": "1m", **kw})


def test_one_cycle_reads_each_metric_and_scope(influx_client, tmp_path):
    now = time.time_ns()
    _write_run(influx_client, "r1", now)
    store = RuleStore(tmp_path / "rules.json")
    store.put_all([
        _rule(name="orders-p99", condition="p99 > 1ms", pipeline="orders"),
        _rule(name="nbbo-p99", condition="p99 > 1ms", pipeline="nbbo"),             # 20 µs: holds
        _rule(name="all-p50", condition="p50 >= 20us"),                             # 20 µs and 2 ms merged
        _rule(name="other-job", condition="p99 > 1ns", job="r2"),                  # no data: never fires
        _rule(name="slow", condition="p99 > 1ms", pipeline="orders", **{"for": "30s"}),
        _rule(name="backlog", condition="backlog > 1k"),
        _rule(name="bp", condition="backpressure > 50%", job="r1"),
        _rule(name="quiet", condition="backpressure > 50%", muted=True),
    ])
    sink = MemoryWriter()
    with WebhookReceiver() as hook:
        for name in ("orders-p99", "quiet"):
            r = store.get(name)
            store.put(Rule.from_dict({**r.to_dict(), "webhook": hook.url}))
        notifier = WebhookNotifier(first_backoff_s=0.1, policy=WebhookPolicy.parse("127.0.0.1")).start()
        ev = AlertEvaluator(store, influx_client, sink, notifier=notifier)
        changes = {r.name: (t.previous, t.state, t.value) for r, t in ev.evaluate_once(now)}
        # HdrHistogram's value at a percentile: the highest value of the bucket holding it
        p = lambda v, q: LatencyHistogram.from_values(np.full(1000, v)).value_at_percentile(q)  # noqa: E731
        assert changes == {"orders-p99": (OK, FIRING, p(2_000_000, 99)), "all-p50": (OK, FIRING, p(20_000, 50)),
                           "slow": (OK, PENDING, p(2_000_000, 99)), "backlog": (OK, FIRING, 5000.0),
                           "bp": (OK, FIRING, pytest.approx(0.6)), "quiet": (OK, FIRING, pytest.approx(0.6))}
        assert hook.next(timeout=10)["rule"] == "orders-p99"          # the muted rule sends nothing
        ev.notifier.stop()
    assert hook.received.empty()
    events = sink.measurement(ALERT_EVENTS)
    assert sorted(p.tags["rule"] for p in events) == sorted(changes)
    assert {p.fields["scope"] for p in events if p.tags["rule"] == "bp"} == {"job r1"}

    # the pending rule fires once held for 30 s (the window still covers the data)
    later = {r.name: t.state for r, t in ev.evaluate_once(now + 31 * NS)}
    assert later == {"slow": FIRING}


def test_edits_deletes_and_a_damaged_file_between_cycles(influx_client, tmp_path, caplog):
    now = time.time_ns()
    _write_run(influx_client, "r1", now)
    store = RuleStore(tmp_path / "rules.json")
    store.put(_rule(name="a", condition="p99 > 1ms"))
    store.put(_rule(name="b", condition="p99 > 1ms"))
    sink = MemoryWriter()
    ev = AlertEvaluator(store, influx_client, sink, resolved_hold_s=10)
    assert {r.name: t.state for r, t in ev.evaluate_once(now)} == {"a": FIRING, "b": FIRING}

    store.put(_rule(name="a", condition="p99 > 1s"))                  # edited: resolves
    store.remove("b")                                                  # deleted while firing: closed
    assert {r.name: t.state for r, t in ev.evaluate_once(now + NS)} == {"a": RESOLVED}
    closing = [p for p in sink.measurement(ALERT_EVENTS) if p.tags["rule"] == "b"][-1]
    assert (closing.fields["previous"], closing.fields["state"], closing.fields["condition"]) == \
        (FIRING, OK, "(rule deleted)")

    store.path.write_text("{half a file")
    assert ev.evaluate_once(now + 2 * NS) == []                        # rules kept, still evaluated
    assert [r.name for r in ev.rules] == ["a"] and "damaged" in caplog.text
    assert [(r.name, t.state) for r, t in ev.evaluate_once(now + 12 * NS)] == [("a", OK)]


def test_influxdb_outage_is_reported_per_rule_and_changes_nothing(tmp_path):
    down = InfluxClient(InfluxConfig(url="http://127.0.0.1:1", timeout=1))
    store = RuleStore(tmp_path / "rules.json")
    store.put(_rule(name="a", condition="p99 > 1ms"))
    ev = AlertEvaluator(store, down, MemoryWriter())
    assert ev.evaluate_once() == []
    assert "InfluxDB" in ev.errors["a"] and "Connection refused" in ev.errors["a"]
    assert ev.states == {}
