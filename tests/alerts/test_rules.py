"""Rule parsing, the state machine and the rules file (pure logic and local files only)."""
from __future__ import annotations

import json

import pytest

from alerts.evaluate import FIRING, OK, PENDING, RESOLVED, AlertState, advance, run_series
from alerts.rules import Rule, check_webhook, parse_condition, parse_duration, redact_url
from alerts.store import RuleStore, read_rules_file

S = 1_000_000_000


@pytest.mark.parametrize("text, metric, op, threshold", [
    ("p99 > 5ms", "p99", ">", 5e6),
    ("p99.9>=250us", "p99.9", ">=", 250e3),
    ("p50 < 1.5 s", "p50", "<", 1.5e9),
    ("P99.99 > 10µs", "p99.99", ">", 1e4),
    ("p95 <= 800ns", "p95", "<=", 800.0),
    ("throughput < 10k/s", "throughput", "<", 1e4),
    ("throughput < 2.5M", "throughput", "<", 2.5e6),
    ("throughput < 500events/s", "throughput", "<", 500.0),
    ("backlog > 1M", "backlog", ">", 1e6),
    ("backlog > 2000", "backlog", ">", 2000.0),
    ("backpressure > 50%", "backpressure", ">", 0.5),
    ("backpressure >= 0.1", "backpressure", ">=", 0.1),
])
def test_conditions_parse_into_base_units(text, metric, op, threshold):
    c = parse_condition(text)
    assert (c.metric, c.op) == (metric, op)
    assert c.threshold == pytest.approx(threshold)
    assert parse_condition(c.text) == c                      # the normalised text reads back the same


@pytest.mark.parametrize("text, reason", [
    ("", "empty"),
    ("p99 >", "not understood"),
    ("p99 > 5", "needs a unit"),
    ("p99 > 5 parsecs", "needs a unit"),
    ("p40 > 5ms", "outside p50..p99.99"),
    ("p99.999 > 5ms", "unknown"),
    ("latency > 5ms", "unknown"),
    ("throughput < 10x/s", "unknown unit"),
    ("backpressure > 150%", "outside 0..100%"),
    ("backpressure > 3ms", "must be a share"),
    ("p99 > 5ms; DROP DATABASE x", "not understood"),
    ("p99 = 5ms", "not understood"),
])
def test_bad_conditions_say_why(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_condition(text)


def test_breach_compares_and_no_data_never_breaches():
    c = parse_condition("p99 > 5ms")
    assert c.breached(5_000_001) and not c.breached(5_000_000) and not c.breached(None)
    assert parse_condition("throughput < 10k/s").breached(9_999)
    assert c.format_value(12_300_000) == "12.3 ms"


def test_durations():
    assert parse_duration("30s", "w") == 30 and parse_duration("5m", "w") == 300
    assert parse_duration("500ms", "w") == 0.5 and parse_duration(2, "w") == 2 and parse_duration("1h", "w") == 3600
    for bad in ("soon", "-1s", "5 days", True):
        with pytest.raises(ValueError, match="duration|zero or more"):
            parse_duration(bad, "window")


def test_webhooks_are_http_or_https_only():
    assert check_webhook("https://hooks.example.com/a?b=1") == "https://hooks.example.com/a?b=1"
    for bad, why in (("ftp://x/y", "http:// or https://"), ("file:///etc/passwd", "http:// or https://"),
                     ("javascript:alert(1)", "http:// or https://"), ("http:///path", "no host"),
                     ("http://a b/", "without spaces"), ("http://h:99999/", "malformed"), ("", "empty")):
        with pytest.raises(ValueError, match=why):
            check_webhook(bad)
    assert redact_url("https://user:secret@h.example:8443/hook?token=abc") == "https://h.example:8443/hook?…"


def test_rule_from_dict_validates_every_field_and_round_trips():
    r = Rule.from_dict({"name": "e2e-p99", "condition": "p99 > 5ms", "pipeline": "orders", "window": "30s",
                        "for": "10s", "webhook": "http://127.0.0.1:9/hook"})
    assert (r.step, r.pipeline, r.window_s, r.for_s, r.muted) == ("start-to-end", "orders", 30.0, 10.0, False)
    assert Rule.from_dict(r.to_dict()) == r
    assert r.summary() == "any job · orders · start-to-end: p99 > 5ms over 30s for 10s"
    job = Rule.from_dict({"name": "bp", "condition": "backpressure > 50%", "job": "run-1"})
    assert (job.step, job.job) == (None, "run-1")
    for d, why in (({"name": "a b", "condition": "p99 > 1ms"}, "name"),
                   ({"name": "x", "condition": "p99 > 1ms", "step": "../sink"}, "step '../sink' looks like a path"),
                   ({"name": "x\n", "condition": "p99 > 1ms"}, "control character"),      # was accepted
                   ({"name": "x", "condition": "p99 > 1ms", "job": "run-1\n"}, "job .* control character"),
                   ({"name": "x", "condition": "p99 > 1ms", "job": "../r"}, "job .* path separator"),
                   ({"name": "x", "condition": "p99 > 1ms", "worker": "h/p0\r"}, "worker .* control character"),
                   ({"name": "x", "condition": "p99 > 1ms", "window": "0s"}, "between 1s and 24h"),
                   ({"name": "x", "condition": "p99 > 1ms", "webhook": "gopher://h/"}, "http://"),
                   ({"name": "x", "condition": "backlog > 1M", "pipeline": "orders"}, "whole job"),
                   ({"name": "x", "condition": "p99 > 1ms", "muted": "yes"}, "true or false"),
                   ({"name": "x", "condition": "p99 > 1ms", "treshold": 3}, "unknown key"),
                   ("p99 > 1ms", "mapping")):
        with pytest.raises(ValueError, match=why):
            Rule.from_dict(d)


def test_state_machine_follows_prometheus():
    # for = 10 s: pending first, firing once held, resolved when it stops, OK after the hold
    samples = [(0, 1.0, True), (5 * S, 1.0, True), (10 * S, 1.0, True), (15 * S, 1.0, True),
               (20 * S, 0.0, False), (25 * S, 0.0, False), (90 * S, 0.0, False)]
    end, trs = run_series(samples, for_s=10, resolved_hold_s=60)
    assert [(t.previous, t.state, t.at_ns // S) for t in trs] == [
        (OK, PENDING, 0), (PENDING, FIRING, 10), (FIRING, RESOLVED, 20), (RESOLVED, OK, 90)]
    assert end == AlertState(OK, 90 * S, 0.0)
    # a short breach never fires: pending, then back to OK without RESOLVED
    _, trs = run_series([(0, 1.0, True), (5 * S, 0.0, False)], for_s=10)
    assert [t.state for t in trs] == [PENDING, OK]
    # for = 0 fires at once; a breach while resolved starts over
    _, trs = run_series([(0, 1.0, True), (1 * S, None, False), (2 * S, 1.0, True)], for_s=0)
    assert [t.state for t in trs] == [FIRING, RESOLVED, FIRING]
    st, tr = advance(AlertState(FIRING, 0, 1.0), True, 2.0, 5 * S, 10)
    assert tr is None and st == AlertState(FIRING, 0, 2.0)


def test_store_persists_edits_and_loads_yaml(tmp_path):
    path = tmp_path / "alerts" / "rules.json"
    store = RuleStore(path)
    assert store.rules() == []
    a = Rule.from_dict({"name": "a", "condition": "p99 > 5ms"})
    assert store.put(a, replace=False)
    with pytest.raises(ValueError, match="exists already"):
        store.put(a, replace=False)
    store.put(Rule.from_dict({"name": "a", "condition": "p99 > 9ms"}))
    store.set_muted("a", True)
    again = RuleStore(path).rules()                   # a new store on the same file: a restart
    assert [(r.name, r.condition.text, r.muted) for r in again] == [("a", "p99 > 9ms", True)]
    assert json.loads(path.read_text())["version"] == 1

    yml = tmp_path / "rules.yaml"
    yml.write_text("rules:\n"
                   "  - name: e2e\n    condition: p99.9 > 250ms\n    pipeline: orders\n    for: 30s\n"
                   "  - name: slow\n    condition: throughput < 10k/s\n    window: 2m\n"
                   "    webhook: https://hooks.example/x\n")
    rules = read_rules_file(yml)
    assert store.put_all(rules) == (2, 0)
    assert [r.name for r in store.rules()] == ["a", "e2e", "slow"]
    store.remove("a")
    with pytest.raises(ValueError, match="no rule called"):
        store.remove("a")

    yml.write_text("rules:\n  - name: e2e\n    condition: p99 > 5\n")
    with pytest.raises(ValueError, match=r"rule #1: rule 'e2e': latency threshold 5 needs a unit"):
        read_rules_file(yml)
    yml.write_text("rules: [name: x\n")
    with pytest.raises(ValueError, match="not valid YAML at line"):
        read_rules_file(yml)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="damaged"):
        store.rules()
