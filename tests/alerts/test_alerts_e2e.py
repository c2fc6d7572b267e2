"""Alerts end to end: a real replay writes metrics to a real InfluxDB; the evaluator fires,
a local HTTP server receives the webhooks, an edited rule resolves, rules survive a restart."""
from __future__ import annotations

import time

import pytest

from alerts.evaluate import FIRING, OK, PENDING, RESOLVED
from alerts.evaluator import read_status, start_evaluator
from alerts.history import AlertHistory
from alerts.namespace import load_namespace
from alerts.query import MetricReader
from alerts.rules import Rule
from alerts.store import RuleStore
from collector.influx import InfluxWriter
from engine.config import Config
from marketspread.replay import replay
from engine.tools.generate import generate

from .webhook_server import WebhookReceiver

pytestmark = pytest.mark.slow      # a whole replay, then the evaluator firing and resolving, ~40 s


def _wait(pred, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_real_run_fires_then_resolves_and_rules_survive_restart(spark, influx_client, monkeypatch, tmp_path):
    for k, v in influx_client.config.as_env().items():       # URL, database and credentials
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MS_ALERTS_FILE", raising=False)
    monkeypatch.setenv("MS_WEBHOOK_ALLOW", "127.0.0.1")     # the local receiver: an allowed internal target
    nbbo, orders = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
    generate(nbbo, orders, symbols=200, nbbo=20_000, orders=20_000, wide_share=0.1, seed=5)
    state = tmp_path / "state"
    store = RuleStore(state / "alerts" / "rules.json")
    history = AlertHistory(influx_client, load_namespace(store.path))

    with WebhookReceiver() as hook, InfluxWriter(influx_client, tmp_path / "spool").start() as writer:
        store.put(Rule.from_dict({"name": "e2e-p99", "condition": "p99 > 1us", "step": "start-to-end",
                                  "window": "5m", "for": "1s", "webhook": hook.url}))
        store.put(Rule.from_dict({"name": "never", "condition": "p99 > 1h", "window": "5m",
                                  "webhook": hook.url}))
        ev = start_evaluator(state, writer, client=influx_client, interval_s=1.0)
        assert ev is not None
        standby = start_evaluator(state, writer, client=influx_client, interval_s=1.0)
        assert standby is not None                  # a second process' evaluator stands by (the lease)

        # a real run: ingress, Spark job, metrics shipper -> InfluxDB, while the evaluator runs
        rep = replay([nbbo], [orders], tmp_path / "out.msg", Config.from_env(state_dir=tmp_path / "run"),
                     run_id="alerts-e2e", spark=spark)
        assert rep.accepted == 40_200

        # throughput reads the run's events over the window: all of them within 10 minutes
        reader, now = MetricReader(influx_client, settle_s=0), time.time_ns()
        tput = Rule.from_dict({"name": "t", "condition": "throughput < 1k/s", "job": "alerts-e2e", "window": "10m"})
        assert reader.value(tput, now) == pytest.approx(rep.accepted / 600)
        assert reader.value(Rule.from_dict({**tput.to_dict(), "pipeline": "orders"}), now) == \
            pytest.approx(20_000 / 600)
        assert reader.value(Rule.from_dict({**tput.to_dict(), "job": "no-such-run"}), now) is None

        fired = hook.next(timeout=60)
        assert fired["content_type"] == "application/json"
        assert (fired["rule"], fired["state"], fired["previous"]) == ("e2e-p99", FIRING, PENDING)
        assert fired["condition"] == "p99 > 1us" and fired["threshold"] == 1000.0
        assert fired["value"] > 1000.0 and fired["scope"]["step"] == "start-to-end"

        # editing the rule so the run no longer breaks it resolves the alert
        store.put(Rule.from_dict({"name": "e2e-p99", "condition": "p99 > 1h", "window": "5m", "for": "1s",
                                  "webhook": hook.url}))
        resolved = hook.next(timeout=30)
        assert (resolved["rule"], resolved["state"], resolved["previous"]) == ("e2e-p99", RESOLVED, FIRING)
        assert resolved["value"] < 3600e9
        ev.stop()
        standby.stop()
        assert not standby.leads or standby.leader is not None
        assert writer.flush(timeout=10)

        events = _wait(lambda: (lambda e: e if len(e) >= 3 else None)(history.events("e2e-p99")),
                       what="three alert_events")
        assert [(e.previous, e.state) for e in reversed(events)] == [(OK, PENDING), (PENDING, FIRING),
                                                                     (FIRING, RESOLVED)]
        assert history.events("never") == []                       # never breached: no change to record
        delivered = history.notifications("e2e-p99")
        assert sorted((n.state, n.ok) for n in delivered) == [(FIRING, True), (RESOLVED, True)]
        assert all(n.url == hook.url for n in delivered)

        # restart: a new store and evaluator on the same state folder
        assert [r.name for r in RuleStore(state / "alerts" / "rules.json").rules()] == ["e2e-p99", "never"]
        ev2 = start_evaluator(state, writer, client=influx_client, interval_s=1.0)
        assert ev2 is not None
        try:
            _wait(lambda: ev2.rules and ev2._restored, what="the restarted evaluator's first cycle")
            assert [r.condition.text for r in ev2.rules] == ["p99 > 1h", "p99 > 1h"]
            assert ev2.states["e2e-p99"].state == RESOLVED           # restored, not announced again
            assert read_status(store.path)["rules"] == 2
        finally:
            ev2.stop()
        assert hook.received.empty()
