"""Rules on any Spark query's figures evaluated against a real InfluxDB, on points of the
generic-query schema (docs/METRICS.md: spark_progress, spark_source, spark_state, spark_executor)."""
from __future__ import annotations

import re
import time

import pytest

from alerts.evaluate import FIRING, OK
from alerts.evaluator import AlertEvaluator
from alerts.query import MetricReader
from alerts.rules import Rule
from alerts.scope_names import check_rules
from alerts.store import RuleStore
from collector.influx import InfluxClient, InfluxConfig, Point
from collector.testing import MemoryWriter
from collector.units import NS
from marketspread.cli import main


def _progress(run: str, t: int, batch_ms: int, trigger_ms: int | None = 1000, **fields) -> Point:
    f = {"batch_id": t // NS, "batch_ms": batch_ms, **fields}
    if trigger_ms is not None:
        f.update(trigger_ms=trigger_ms, overran=int(batch_ms > trigger_ms))
    return Point("spark_progress", {"run": run, "query": run}, f, t)


def _write_queries(client, now: int) -> None:
    """Ten batches of three queries: `slow` overran 8 of them, `fast` 3, `rates` falls behind in 7."""
    points = []
    for i in range(10):
        t = now - (10 - i) * NS
        points.append(_progress("slow", t, 1500 if i >= 2 else 400, input_rows_per_s=100.0,
                                processed_rows_per_s=200.0, late_rows=2, state_rows=1000 * i,
                                state_memory_bytes=3_000_000, watermark_delay_ms=5000))
        points.append(_progress("fast", t, 1500 if i < 3 else 400, input_rows_per_s=100.0, processed_rows_per_s=100.0))
        points.append(_progress("rates", t, 50, None, input_rows_per_s=900.0 if i % 10 < 7 else 100.0,
                                processed_rows_per_s=500.0, rows_behind=2_000_010))
        for source, behind in (("0:KafkaV2", 2_000_000), ("1:RateStreamV2", 10)):
            points.append(Point("spark_source", {"run": "rates", "query": "rates", "source": source},
                                {"input_rows": 50, "input_rows_per_s": 900.0, "processed_rows_per_s": 500.0,
                                 "rows_behind": behind}, t))
        points.append(Point("spark_state", {"run": "slow", "query": "slow", "operator": "0:stateStoreSave"},
                            {"rows_total": 1000 * i, "rows_updated": 10, "rows_removed": 0,
                             "memory_bytes": 3_000_000, "late_rows": 2}, t))
        for executor, heap in (("driver", 200_000_000), ("1", 1_500_000_000)):
            points.append(Point("spark_executor", {"app": "local-1764", "executor": executor},
                                {"heap_used_bytes": heap, "gc_time_ms": 100 * i}, t))
    client.write(points)


def _rule(**kw) -> Rule:
    return Rule.from_dict({"name": "r", "window": "1m", **kw})


def test_each_figure_reads_its_scope(influx_client):
    now = time.time_ns()
    _write_queries(influx_client, now)
    read = lambda **kw: MetricReader(influx_client).value(_rule(**kw), now)  # noqa: E731
    # batch by batch: the share of the window's batches that meet the comparison
    assert read(condition="batch_duration > trigger", job="slow") == pytest.approx(0.8)
    assert read(condition="batch_duration > trigger", job="fast") == pytest.approx(0.3)
    assert read(condition="batch_duration > trigger") == pytest.approx(0.8)          # the worst query
    assert read(condition="batch_duration > trigger", job="rates") is None           # no trigger: no data
    assert read(condition="input_rate > processing_rate", job="rates") == pytest.approx(0.7)
    assert read(condition="input_rate > processing_rate", job="fast") == 0.0
    assert read(condition="overrun_share > 50%", job="slow") == pytest.approx(0.8)
    # aggregates over the window, in base units (ns, rows, bytes)
    assert read(condition="max(batch_duration) > 1s", job="slow") == 1500e6
    assert read(condition="batch_duration > 1s", job="slow") == pytest.approx((8 * 1500 + 2 * 400) * 1e6 / 10)
    assert read(condition="p50(batch_duration) < 1s") == 50e6                       # `<`: the lowest query
    assert read(condition="watermark_delay > 1s") == 5000e6
    assert read(condition="late_rows > 0", job="slow") == 20                         # summed over the window
    assert read(condition="late_rows > 0", operator="0:stateStoreSave") == 20
    assert read(condition="last(state_rows) > 1k", operator="0:stateStoreSave") == 9000
    assert read(condition="state_memory > 1MB", job="slow") == 3_000_000
    # per source, and the query's own sum
    assert read(condition="rows_behind > 1M", job="rates", source="0:KafkaV2") == 2_000_000
    assert read(condition="rows_behind > 1M", job="rates", source="1:RateStreamV2") == 10
    assert read(condition="rows_behind > 1M", job="rates") == 2_000_010
    assert read(condition="rows_behind > 1M", source="9:NeverReported") is None
    assert read(condition="sum(input_rows) > 1", source="0:KafkaV2") == 500
    # executors: heap of the worst executor, GC time within the window
    assert read(condition="heap_used > 1GB") == 1_500_000_000
    assert read(condition="heap_used > 1GB", executor="driver") == 200_000_000
    assert read(condition="gc_time > 500ms", app="local-1764", executor="1") == 900e6
    # hostile scope values are bound parameters: they match nothing and break nothing
    assert read(condition="rows_behind > 1M", job="rates", source='0:KafkaV2" OR "1"="1') is None
    assert read(condition="rows_behind > 1M", query="x' OR 'a'='a") is None


def test_evaluator_fires_generic_rules_and_keeps_others_ok(influx_client, tmp_path):
    now = time.time_ns()
    _write_queries(influx_client, now)
    store = RuleStore(tmp_path / "rules.json")
    store.put_all([
        _rule(name="slow-overrun", condition="batch_duration > trigger", job="slow"),    # 8 of 10: fires
        _rule(name="fast-overrun", condition="batch_duration > trigger", job="fast"),    # 3 of 10: OK
        _rule(name="kafka-lag", condition="rows_behind > 1M", job="rates", source="0:KafkaV2"),
        _rule(name="rate-lag", condition="rows_behind > 1M", job="rates", source="1:RateStreamV2"),
        _rule(name="falling-behind", condition="input_rate > processing_rate", job="rates"),
        _rule(name="keeping-up", condition="input_rate > processing_rate", job="fast"),
        _rule(name="gone", condition="rows_behind > 0", job="rates", source="7:Gone"),    # no data: OK
        _rule(name="e2e-p99", condition="p99 > 1ms"),                                      # no latency: OK
    ])
    sink = MemoryWriter()
    ev = AlertEvaluator(store, influx_client, sink)
    changes = {r.name: (t.previous, t.state, t.value) for r, t in ev.evaluate_once(now)}
    assert changes == {"slow-overrun": (OK, FIRING, pytest.approx(0.8)),
                       "kafka-lag": (OK, FIRING, 2_000_000),
                       "falling-behind": (OK, FIRING, pytest.approx(0.7))}
    assert ev.errors == {}
    assert {n: s.state for n, s in ev.states.items() if s.state != OK} == {
        "slow-overrun": FIRING, "kafka-lag": FIRING, "falling-behind": FIRING}
    events = {p.tags["rule"]: p.fields for p in sink.measurement("alert_events")}
    assert events["kafka-lag"]["scope"] == "job rates · source 0:KafkaV2"
    assert events["slow-overrun"]["condition"] == "batch_duration > trigger"


def test_scope_values_no_run_reported_are_refused_with_the_valid_ones(influx_client):
    _write_queries(influx_client, time.time_ns())
    check = lambda **kw: check_rules(influx_client, [_rule(**kw)])  # noqa: E731
    assert check(condition="rows_behind > 1M", job="rates", source="0:KafkaV2") == []
    assert check(condition="late_rows > 0", job="slow", query="slow", operator="0:stateStoreSave") == []
    assert check(condition="heap_used > 1GB", app="local-1764", executor="driver") == []
    for kw, message in (
            ({"job": "rates", "source": "0:Kafka"}, "rule 'r': source '0:Kafka' is not a source of run rates; "
                                                    "did you mean '0:KafkaV2'? valid: 0:KafkaV2, 1:RateStreamV2"),
            ({"job": "slow", "source": "0:KafkaV2"}, "rule 'r': source '0:KafkaV2' not checked"),
            ({"job": "rates", "query": "rats"}, "query 'rats' is not a query of run rates; did you mean 'rates'?"),
            ({"condition": "late_rows > 0", "operator": "0:stateStore"}, "operator '0:stateStore' is not an "
                                                                         "operator of any run"),
            ({"condition": "heap_used > 1GB", "executor": "7"}, "executor '7' is not an executor of any app"),
    ):
        kw = {"condition": "rows_behind > 1M", **kw}
        if "not checked" in message:           # the run has reported no source at all: accepted with a note
            assert check(**kw) == [message + " (run slow has reported no source yet)"]
            continue
        with pytest.raises(ValueError, match=re.escape(message)):
            check(**kw)
    down = InfluxClient(InfluxConfig(url="http://127.0.0.1:1", timeout=1))
    assert check_rules(down, [_rule(condition="rows_behind > 1M", source="0:KafkaV2")]) == \
        ["rule 'r': source '0:KafkaV2' not checked (InfluxDB at http://127.0.0.1:1 is unreachable)"]


def test_alerts_add_takes_a_figure_rule_and_refuses_a_source_never_reported(influx_client, tmp_path, monkeypatch,
                                                                            capsys):
    for k, v in influx_client.config.as_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("MS_ALERTS_FILE", raising=False)
    _write_queries(influx_client, time.time_ns())
    state = str(tmp_path / "state")
    assert main(["alerts", "--state-dir", state, "add", "lag", "rows_behind > 1M", "--job", "rates",
                 "--source", "0:KafkaV2", "--window", "2m"]) == 0
    assert "added lag: job rates · source 0:KafkaV2: rows_behind > 1M over 2m" in capsys.readouterr().out
    for args, message in ((("--source", "0:Kafka"), "source '0:Kafka' is not a source of run rates"),
                          (("--step", "sink"), "leave step, pipeline and worker empty"),
                          (("--source", "0:KafkaV2", "--operator", "0:x"), "a source or an operator, not both")):
        assert main(["alerts", "--state-dir", state, "add", "x", "rows_behind > 1M", "--job", "rates", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["alerts", "--state-dir", state, "add", "x", "rows_behind > 5ms"]) == 2
    assert "wrong unit" in capsys.readouterr().err
    assert [r.name for r in RuleStore(tmp_path / "state" / "alerts" / "rules.json").rules()] == ["lag"]
