"""Alertmanager as a target, all real: InfluxDB holds a run's latency, the evaluator judges it,
Alertmanager (Debian's 0.25) receives the alerts and notifies a local webhook receiver."""
from __future__ import annotations

import json
import logging
import time

from alerts.alertmanager import AlertmanagerSender
from alerts.alertmanager_server import AlertmanagerServer
from alerts.evaluate import FIRING, RESOLVED
from alerts.evaluator import AlertEvaluator, read_status
from alerts.rules import Rule
from alerts.store import RuleStore
from collector.influx.server import free_port
from collector.query.ranges import format_time
from collector.testing import MemoryWriter
from collector.units import NS

from .alertmanager_fixture import alertmanager, start_alertmanager, wait_until  # noqa: F401 - the fixture
from .test_evaluator import _write_run
from .webhook_server import WebhookReceiver

UI = "http://127.0.0.1:8050"


def _rule(name: str, condition: str = "p99 > 1ms", **kw) -> Rule:
    return Rule.from_dict({"name": name, "condition": condition, "pipeline": "orders", "job": "r1", "window": "1m",
                           **kw})


def _evaluator(tmp_path, client, url: str, *rules: Rule, interval_s: float = 1.0) -> AlertEvaluator:
    store = RuleStore(tmp_path / "alerts" / "rules.json")
    store.put_all(list(rules))
    sender = AlertmanagerSender(url, interval_s=interval_s, ui_url=UI, first_backoff_s=0.2)
    return AlertEvaluator(store, client, MemoryWriter(), interval_s=interval_s, alertmanager=sender)


def _held(am, rule: str) -> list[dict]:
    return [a for a in am.alerts() if a["labels"].get("rule") == rule]


def _next_about(hook: WebhookReceiver, rule: str, timeout: float = 60.0) -> dict:
    """Return the next notification Alertmanager sent about `rule` (others are skipped)."""
    deadline = time.monotonic() + timeout
    while True:
        msg = hook.next(timeout=max(0.1, deadline - time.monotonic()))
        if any(a["labels"].get("rule") == rule for a in msg["alerts"]):
            return msg


def test_a_firing_rule_reaches_alertmanager_with_its_labels_and_resolves(alertmanager, influx_client, tmp_path):
    _write_run(influx_client, "r1", time.time_ns())
    ev = _evaluator(tmp_path, influx_client, alertmanager.url, _rule("am-p99", severity="critical"))
    ev.alertmanager.start()
    try:
        assert [(r.name, t.state) for r, t in ev.evaluate_once()] == [("am-p99", FIRING)]
        held = alertmanager.wait_for(lambda: _held(alertmanager, "am-p99"), what="the alert in /api/v2/alerts")
        assert len(held) == 1
        alert = held[0]
        judged = {k: v for k, v in ev.series.get("am-p99", {}).items() if k in ("query", "run_id") and v}
        assert alert["labels"] == {"alertname": "am-p99", "rule": "am-p99", "job": "r1", "severity": "critical",
                                   "namespace": ev.namespace.id, **judged}
        assert alert["status"]["state"] == "active" and alert["generatorURL"] == f"{UI}/run/r1"
        assert alert["annotations"]["summary"].startswith("am-p99 fires: job r1")
        assert "p99 > 1ms" in alert["annotations"]["description"]

        fired = _next_about(alertmanager.hook, "am-p99")
        assert fired["status"] == "firing" and fired["alerts"][0]["labels"] == alert["labels"]
        assert alertmanager.url.rsplit("/", 1)[1] not in json.dumps(fired)     # receivers never see its token

        ev.store.put(_rule("am-p99", "p99 > 1s", severity="critical"))         # the run no longer breaks it
        assert [(r.name, t.state) for r, t in ev.evaluate_once()] == [("am-p99", RESOLVED)]
        resolved = _next_about(alertmanager.hook, "am-p99")
        assert resolved["status"] == "resolved" and resolved["alerts"][0]["status"] == "resolved"
        assert _held(alertmanager, "am-p99") == []                # a resolved alert leaves /api/v2/alerts
    finally:
        ev.alertmanager.stop()


def test_a_silence_set_in_alertmanager_holds_the_notification_back(alertmanager, influx_client, tmp_path):
    now = time.time_ns()
    _write_run(influx_client, "r1", now)
    silence = alertmanager.api("POST", "/silences", {
        "matchers": [{"name": "rule", "value": "am-quiet", "isRegex": False, "isEqual": True}],
        "startsAt": format_time(now), "endsAt": format_time(now + 3600 * NS), "createdBy": "test",
        "comment": "maintenance"})["silenceID"]
    ev = _evaluator(tmp_path, influx_client, alertmanager.url, _rule("am-quiet"))
    ev.alertmanager.start()
    try:
        ev.evaluate_once()
        quiet = alertmanager.wait_for(lambda: [a for a in _held(alertmanager, "am-quiet")
                                               if a["status"]["state"] == "suppressed"], what="a suppressed alert")
        assert quiet[0]["status"]["silencedBy"] == [silence]

        # a second rule fires after the silenced one's group had its first flush: its notification
        # arriving means Alertmanager has decided about the silenced one, and held it back
        ev.store.put(_rule("am-loud"))
        ev.evaluate_once()
        before = []
        while not any(a["labels"]["rule"] == "am-loud" for m in before for a in m["alerts"]):
            before.append(alertmanager.hook.next(timeout=60))
        assert [a["labels"]["rule"] for m in before for a in m["alerts"]] == ["am-loud"]

        alertmanager.api("DELETE", f"/silence/{silence}")          # the silence expires: the alert goes out
        held_back = _next_about(alertmanager.hook, "am-quiet")
        assert held_back["status"] == "firing"
    finally:
        ev.alertmanager.stop()


def test_alertmanager_down_is_one_log_line_and_the_alert_arrives_once_it_is_up(influx_client, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="alerts.alertmanager")
    _write_run(influx_client, "r1", time.time_ns())
    port = free_port()
    url = AlertmanagerServer(tmp_path / "am", port).url            # its URL (with its token) before it runs
    ev = _evaluator(tmp_path, influx_client, url, _rule("am-outage"), interval_s=0.5)
    with WebhookReceiver() as hook:
        ev.start()                                                  # starts the sender with it
        am = None
        try:
            first = wait_until(lambda: read_status(ev.store.path), what="a first cycle")["last_cycle_ns"]
            wait_until(lambda: "not reached" in caplog.text, what="the outage's log line")
            later = wait_until(lambda: (s := read_status(ev.store.path)) and s["last_cycle_ns"] > first and s,
                          what="cycles after the outage")
            assert ev.states["am-outage"].state == FIRING and later["errors"] == {}   # the evaluator goes on

            am = start_alertmanager(tmp_path / "am", hook, port)
            held = am.wait_for(lambda: _held(am, "am-outage"), what="the alert after the outage")
            assert held[0]["labels"]["job"] == "r1"
            assert _next_about(hook, "am-outage")["status"] == "firing"
            warnings = [r for r in caplog.records if r.name == "alerts.alertmanager" and r.levelno >= logging.WARNING]
            assert len(warnings) == 1 and "not reached" in warnings[0].getMessage()
            assert "reachable again" in caplog.text
        finally:
            ev.stop()
            if am is not None:
                am.server.stop()
