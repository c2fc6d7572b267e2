"""The Alertmanager target's pure parts: labels, the API v2 body, what each cycle posts; settings and severity."""
from __future__ import annotations

import logging
import threading

import pytest

from alerts.alertmanager import (
    AlertmanagerSender, RuleAlert, SentAlert, alert_body, alert_labels, check_base_url, plan, rule_alerts,
    sender_from_settings)
from alerts.evaluate import FIRING, OK, RESOLVED, AlertState, Transition
from alerts.rules import Rule
from alerts.settings import DEFAULT_UI_URL, AlertSettings
from collector.query.ranges import format_time
from collector.units import NS

T0 = 1_700_000_000 * NS
UI = "http://ui.example:8050"
SERIES = {"job": "orders-enrich", "query": "enrich", "run_id": "5f0c-run", "pipeline": "ignored"}


def _rule(name: str = "lag", **kw) -> Rule:
    return Rule.from_dict({"name": name, "condition": "rows_behind > 1M", **kw})


def _plan(sent, alerts, now, **kw):
    return plan(sent, alerts, now, namespace="ns1", ui_url=UI, resend_s=60, valid_s=240, **kw)


def test_labels_name_the_rule_its_run_and_its_severity():
    assert alert_labels(_rule(severity="critical"), SERIES, "ns1") == {
        "alertname": "lag", "rule": "lag", "job": "orders-enrich", "query": "enrich", "run_id": "5f0c-run",
        "severity": "critical", "namespace": "ns1"}
    # the rule's own scope wins over the judged series'; unknown series labels are left out
    assert alert_labels(_rule(job="nightly", query="q1"), {}, "ns1") == {
        "alertname": "lag", "rule": "lag", "job": "nightly", "query": "q1", "severity": "warning",
        "namespace": "ns1"}
    # a cycle that knows no series keeps the last one's labels
    assert alert_labels(_rule(), {}, "ns1", previous=SERIES)["run_id"] == "5f0c-run"


def test_the_body_is_alertmanagers_api_v2_alert():
    labels = alert_labels(_rule(), SERIES, "ns1")
    body = alert_body(_rule(), FIRING, 2.5e6, labels, T0, T0 + 240 * NS, UI)
    assert body["labels"] == labels
    assert (body["startsAt"], body["endsAt"]) == (format_time(T0), format_time(T0 + 240 * NS))
    assert body["startsAt"] == "2023-11-14T22:13:20.000000000Z"
    assert body["generatorURL"] == f"{UI}/run/orders-enrich"
    assert body["annotations"]["summary"].startswith("lag fires: ")
    assert "rows_behind > 1M" in body["annotations"]["description"]
    assert body["annotations"]["value"] == _rule().condition.format_value(2.5e6)
    # a run name with characters a path must escape; no run known: the Alerts page
    assert alert_body(_rule(job="a:b@c"), FIRING, 1, {"job": "a:b@c"}, T0, T0, UI)["generatorURL"] == \
        f"{UI}/run/a%3Ab%40c"
    assert alert_body(_rule(), FIRING, 1, {}, T0, T0, UI)["generatorURL"] == f"{UI}/alerts"
    resolved = alert_body(_rule(), RESOLVED, 10.0, labels, T0, T0 + 5 * NS, UI)
    assert resolved["annotations"]["summary"].startswith("lag is resolved: ")


def test_firing_is_posted_then_resent_each_resend_period_with_a_later_end():
    firing = [RuleAlert(_rule(), FIRING, T0, 2e6, SERIES)]
    bodies, sent = _plan({}, firing, T0 + NS)
    assert len(bodies) == 1 and bodies[0]["endsAt"] == format_time(T0 + NS + 240 * NS)
    assert bodies[0]["startsAt"] == format_time(T0)
    assert _plan(sent, firing, T0 + 30 * NS) == ([], sent)                  # within 60 s: nothing to post
    again, sent2 = _plan(sent, firing, T0 + 61 * NS)
    assert [b["endsAt"] for b in again] == [format_time(T0 + 301 * NS)]
    assert again[0]["startsAt"] == format_time(T0) and sent2["lag"].sent_ns == T0 + 61 * NS


def test_resolved_is_posted_once_with_the_labels_it_fired_with_and_the_resolve_time():
    _, sent = _plan({}, [RuleAlert(_rule(), FIRING, T0, 2e6, SERIES)], T0)
    # the scope reports nothing any more: the resolved alert must still match the firing one
    bodies, after = _plan(sent, [RuleAlert(_rule(), RESOLVED, T0 + 9 * NS, None, {})], T0 + 10 * NS)
    assert after == {} and len(bodies) == 1
    assert bodies[0]["labels"] == sent["lag"].body["labels"]
    assert (bodies[0]["startsAt"], bodies[0]["endsAt"]) == (format_time(T0), format_time(T0 + 9 * NS))
    assert _plan(after, [], T0 + 20 * NS) == ([], {})                      # and never again


def test_new_labels_close_the_old_alert_and_a_rule_gone_from_firing_is_closed():
    _, sent = _plan({}, [RuleAlert(_rule(), FIRING, T0, 2e6, SERIES)], T0)
    restarted = {**SERIES, "run_id": "77aa-run"}
    bodies, sent = _plan(sent, [RuleAlert(_rule(), FIRING, T0, 2e6, restarted)], T0 + NS)
    assert [(b["labels"]["run_id"], b["endsAt"]) for b in bodies] == [
        ("5f0c-run", format_time(T0 + NS)), ("77aa-run", format_time(T0 + 241 * NS))]
    # muted, deleted, or no longer firing without a transition: closed at the cycle's time
    bodies, sent = _plan(sent, [], T0 + 2 * NS)
    assert sent == {}
    assert [(b["labels"]["run_id"], b["endsAt"]) for b in bodies] == [("77aa-run", format_time(T0 + 2 * NS))]


def test_the_cycle_hands_over_firing_rules_and_resolved_transitions_of_unmuted_rules():
    rules = [_rule("a"), _rule("b"), _rule("c", muted=True), _rule("d")]
    states = {"a": AlertState(FIRING, T0, 2e6), "b": AlertState(RESOLVED, T0, 1.0), "c": AlertState(FIRING, T0, 2e6),
              "d": AlertState(OK, T0, 1.0)}
    changes = [(rules[1], Transition(FIRING, RESOLVED, T0, 1.0))]
    got = rule_alerts(rules, states, changes, {"a": SERIES})
    assert [(a.rule.name, a.state, a.series) for a in got] == [("a", FIRING, SERIES), ("b", RESOLVED, {})]


def test_the_url_is_checked_and_never_logged_with_its_credentials(caplog):
    assert check_base_url(" http://127.0.0.1:19093/ ", "MS_ALERTMANAGER_URL") == "http://127.0.0.1:19093"
    assert check_base_url("https://am.internal/prefix", "X") == "https://am.internal/prefix"
    for bad, why in (("ftp://am:9093", "http:// or https://"), ("http://am:9093/?x=1", "query"),
                     ("http:///api", "no host"), ("http://am:99999", "malformed"), ("", "empty")):
        with pytest.raises(ValueError, match=why):
            check_base_url(bad, "MS_ALERTMANAGER_URL")
    caplog.set_level(logging.INFO, logger="alerts.alertmanager")
    am = AlertmanagerSender("http://ops:s3cret@127.0.0.1:9/", interval_s=5)
    am.start()
    am.stop()
    assert "127.0.0.1:9" in caplog.text and "s3cret" not in caplog.text and "s3cret" not in repr(am)


def test_settings_build_the_sender_and_a_bad_url_is_one_line_not_a_crash(tmp_path, caplog):
    assert sender_from_settings(AlertSettings.from_env({}, tmp_path), 5.0) is None
    s = AlertSettings.from_env({"MS_ALERTMANAGER_URL": "http://127.0.0.1:19093", "MS_UI_URL": UI}, tmp_path)
    assert (s.alertmanager_url, s.ui_url) == ("http://127.0.0.1:19093", UI)
    assert AlertSettings.from_env({}, tmp_path).ui_url == DEFAULT_UI_URL
    am = sender_from_settings(s, 5.0)
    assert am is not None and am.url == "http://127.0.0.1:19093" and am.valid_s == 240.0
    bad = AlertSettings.from_env({"MS_ALERTMANAGER_URL": "file:///etc/passwd"}, tmp_path)
    assert sender_from_settings(bad, 5.0) is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "alerts: MS_ALERTMANAGER_URL must start with http:// or https:// (got file scheme); "
        "alerts are not posted to Alertmanager"]


def test_waiting_alerts_are_bounded_and_a_retry_posts_the_newest_body_only():
    posted: list[list[dict]] = []
    calls, resume = threading.Semaphore(0), threading.Event()

    def send(url, bodies, timeout):                 # an in-memory transport: the first post fails
        posted.append(list(bodies))
        calls.release()
        if len(posted) == 1:
            resume.wait(30)
            raise ConnectionRefusedError("down")
        return 200

    am = AlertmanagerSender("http://127.0.0.1:9", interval_s=5, first_backoff_s=0.3, max_pending=2, send=send)
    first = {"labels": {"rule": "a"}, "endsAt": "x1"}
    assert am.submit([first, {"labels": {"rule": "b"}, "endsAt": "x"}, {"labels": {"rule": "c"}, "endsAt": "x"}]) == 2
    assert am.dropped == 1 and am.pending() == 2
    am.start()
    try:
        assert calls.acquire(timeout=30)                        # while the first post is failing ...
        newer = {"labels": {"rule": "a"}, "endsAt": "x2"}
        assert am.submit([newer]) == 1 and am.pending() == 2    # ... a newer body of "a" replaces the waiting one
        resume.set()
        assert calls.acquire(timeout=30)
    finally:
        am.stop()
    assert posted[1] == [newer, {"labels": {"rule": "b"}, "endsAt": "x"}] and am.pending() == 0


def test_a_rule_has_a_severity_checked_like_a_name():
    assert _rule().severity == "warning" and "severity" not in _rule().to_dict()
    page = _rule(severity="page")
    assert page.to_dict()["severity"] == "page" and Rule.from_dict(page.to_dict()) == page
    for bad in ("has space", "x" * 33, "../etc", 3):
        with pytest.raises(ValueError, match="severity"):
            _rule(severity=bad)


def test_sent_alert_keeps_the_start_of_the_alert():
    _, sent = _plan({}, [RuleAlert(_rule(), FIRING, T0, 2e6, SERIES)], T0 + 5 * NS)
    assert sent["lag"] == SentAlert(sent["lag"].body, T0 + 5 * NS, T0)
