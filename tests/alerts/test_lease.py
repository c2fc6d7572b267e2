"""One evaluator per rules namespace at a time, by a lease in a real InfluxDB: several processes'
evaluators of one rules folder make each transition once, and a standby takes over when the
leader stops or dies without announcing a firing alert again."""
from __future__ import annotations

import time

from alerts.evaluate import FIRING
from alerts.evaluator import AlertEvaluator
from alerts.lease import Holder, leader_of
from alerts.rules import Rule
from alerts.store import RuleStore
from collector.influx import Point
from collector.units import NS


class _DirectSink:
    """Writes points at once, as the writer would within a second: the next evaluator reads them."""

    def __init__(self, client):
        self.client = client

    def add(self, points):
        self.client.write(list(points))


def test_the_first_started_live_holder_leads():
    a, b, c = Holder("h:1:a", 10, 50), Holder("h:2:b", 5, 50), Holder("h:3:c", 5, 40)
    assert leader_of([a, b, c]) == b                                 # started first; ties by id
    assert leader_of([]) is None


def _pair(tmp_path, client):
    store = RuleStore(tmp_path / "alerts" / "rules.json")
    store.put(Rule.from_dict({"name": "slow", "condition": "batch_duration > trigger", "window": "30s"}))
    sink = _DirectSink(client)
    return [AlertEvaluator(RuleStore(store.path), client, sink, interval_s=1.0, lease=True) for _ in range(2)]


def _batches(client, now):
    client.write([Point("spark_progress", {"run": "job", "query": "job"},
                        {"batch_id": i, "batch_ms": 1500, "trigger_ms": 1000, "overran": 1}, now - (10 - i) * NS)
                  for i in range(10)])


def test_two_evaluators_of_one_rules_folder_make_each_transition_once(tmp_path, influx_client):
    now = time.time_ns()
    _batches(influx_client, now)
    a, b = _pair(tmp_path, influx_client)
    # first cycle: each has written its heartbeat, neither evaluates yet (each may not see the other)
    assert a.evaluate_once(now) == [] and b.evaluate_once(now + NS // 10) == []
    made = a.evaluate_once(now + NS) + b.evaluate_once(now + NS + NS // 10)
    assert [(r.name, tr.state) for r, tr in made] == [("slow", FIRING)]
    assert a.leads and not b.leads and b.leader.id == a.lease.holder
    for i in range(2, 5):                                            # still one leader, nothing announced again
        assert a.evaluate_once(now + i * NS) == [] and b.evaluate_once(now + i * NS + NS // 10) == []


def test_a_standby_takes_over_when_the_leader_stops_and_does_not_announce_again(tmp_path, influx_client):
    now = time.time_ns()
    _batches(influx_client, now)
    a, b = _pair(tmp_path, influx_client)
    a.evaluate_once(now), b.evaluate_once(now + NS // 10)      # b's process started a little later
    assert len(a.evaluate_once(now + NS)) == 1 and b.evaluate_once(now + NS) == []
    a.lease.release(now + 2 * NS)                                    # what stop() does
    assert b.evaluate_once(now + 3 * NS) == []                       # leads now; FIRING restored, not re-sent
    assert b.leads and b.states["slow"].state == FIRING


def test_a_standby_takes_over_within_three_cycles_of_a_leader_that_died(tmp_path, influx_client):
    now = time.time_ns()
    _batches(influx_client, now)
    a, b = _pair(tmp_path, influx_client)
    a.evaluate_once(now), b.evaluate_once(now + NS // 10)      # b's process started a little later
    a.evaluate_once(now + NS), b.evaluate_once(now + NS)
    assert a.leads and not b.leads
    # a is SIGKILLed: no more heartbeats, no release
    b.evaluate_once(now + 3 * NS)
    assert not b.leads                                               # within the TTL: a may be slow only
    b.evaluate_once(now + 5 * NS)
    assert b.leads and b.states["slow"].state == FIRING


def test_without_influxdb_no_one_evaluates_and_the_status_says_why(tmp_path):
    from collector.influx import InfluxClient, InfluxConfig
    from alerts.evaluator import read_status
    store = RuleStore(tmp_path / "alerts" / "rules.json")
    store.put(Rule.from_dict({"name": "slow", "condition": "batch_duration > trigger"}))
    ev = AlertEvaluator(store, InfluxClient(InfluxConfig(url="http://127.0.0.1:9")), _DirectSink(None),
                        interval_s=1.0, lease=True)
    assert ev.evaluate_once() == [] and not ev.leads
    assert read_status(store.path)["errors"]["slow"].startswith("InfluxDB")


def test_alerts_list_names_the_process_that_evaluates_and_a_rule_kept_without_data(tmp_path, influx_client,
                                                                                     monkeypatch, capsys):
    from alerts.evaluator import start_evaluator
    from marketspread.cli import main
    for k, v in influx_client.config.as_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MS_ALERTS_FILE", raising=False)
    state = tmp_path / "state"
    RuleStore(state / "alerts" / "rules.json").put(
        Rule.from_dict({"name": "quiet", "condition": "rows_behind > 1M", "job": "nobody"}))
    evs = [start_evaluator(state, _DirectSink(influx_client), client=influx_client, interval_s=0.2) for _ in range(2)]
    try:
        deadline = time.monotonic() + 20
        while not any(ev.leads and ev.no_data_since for ev in evs) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        assert main(["alerts", "--state-dir", str(state), "list"]) == 0
        out = capsys.readouterr()
        assert "evaluated by" in out.err and "1 other process standing by" in out.err
        assert "no data since" in out.out and "(nodata: keep)" in out.out
    finally:
        for ev in evs:
            ev.stop()
    assert main(["alerts", "--state-dir", str(state), "list"]) == 0
    assert "no evaluator is running" in capsys.readouterr().err
