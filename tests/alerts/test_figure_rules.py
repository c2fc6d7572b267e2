"""Conditions on any Spark query's figures: parsing, scopes, and the InfluxQL they read (pure)."""
from __future__ import annotations

import pytest

from alerts.figure_read import figure_request
from alerts.figures import FIGURES, MOST
from alerts.rules import FIGURE, LATENCY, Rule, parse_condition
from collector.influx.figure_reads import figure_influxql

S = 1_000_000_000


@pytest.mark.parametrize("text, metric, aggregate, against, threshold", [
    ("batch_duration > trigger", "batch_duration", None, "trigger", MOST),
    ("input_rate > processing_rate", "input_rate", None, "processing_rate", MOST),
    ("rows_behind > 1M", "rows_behind", None, None, 1e6),
    ("rows_behind >= 250k rows", "rows_behind", None, None, 250e3),
    ("max(batch_duration) > 30s", "max", "max", None, 30e9),
    ("P99( batch_duration )>=1.5s", "batch_duration", "p99", None, 1.5e9),
    ("p99.9(watermark_delay) > 2min", "watermark_delay", "p99.9", None, 120e9),
    ("overrun_share > 50%", "overrun_share", None, None, 0.5),
    ("input_rate < 10k/s", "input_rate", None, None, 1e4),
    ("processing_rate < 2.5k rows/s", "processing_rate", None, None, 2500.0),
    ("late_rows > 0", "late_rows", None, None, 0.0),
    ("sum(input_rows) < 100", "input_rows", "sum", None, 100.0),
    ("state_rows > 5M", "state_rows", None, None, 5e6),
    ("state_memory > 2GB", "state_memory", None, None, 2e9),
    ("last(state_memory) > 512MiB", "state_memory", "last", None, 512 * 1024 ** 2),
    ("heap_used > 1.5GB", "heap_used", None, None, 1.5e9),
    ("gc_time > 5s", "gc_time", None, None, 5e9),
    ("files_behind > 10", "files_behind", None, None, 10.0),
])
def test_figure_conditions_parse_into_base_units(text, metric, aggregate, against, threshold):
    c = parse_condition(text)
    assert c.kind == FIGURE and c.metric in FIGURES
    if metric != "max":
        assert c.metric == metric
    assert (c.aggregate, c.against) == (aggregate, against)
    assert c.threshold == pytest.approx(threshold)
    assert parse_condition(c.text) == c                      # the normalised text reads back the same


def test_latency_and_job_conditions_parse_as_before():
    assert parse_condition("p99 > 5ms").kind == LATENCY
    assert parse_condition("p99.9 >= 250us").percentile == 99.9
    assert parse_condition("throughput < 10k/s").kind == "throughput"
    assert parse_condition("backlog > 1M").threshold == 1e6


@pytest.mark.parametrize("text, reason", [
    ("batch_lenght > 1s", "figure 'batch_lenght' is unknown: use batch_duration"),
    ("rows_behind > 5ms", "wrong unit: rows_behind is .* count of rows"),
    ("batch_duration > 1M", "wrong unit: .* duration unit"),
    ("batch_duration > 30", "wrong unit"),
    ("state_memory > 3ms", "wrong unit: .* bytes"),
    ("input_rate > 3GB", "wrong unit: .* rows per second"),
    ("overrun_share > 150%", "outside 0..100%"),
    ("overrun_share > 5ms", "must be a share"),
    ("batch_duration > input_rate", "compares a duration with a rate"),
    ("batch_duration > batch_duration", "with itself"),
    ("batch_duration > trigger_ms", "figure 'trigger_ms' is unknown"),
    ("p99(batch_duration) > trigger", "batch by batch, so write them without an aggregate"),
    ("median(batch_duration) > 1s", "aggregate 'median' is unknown"),
    ("p40(batch_duration) > 1s", "aggregate 'p40' is unknown"),
    ("max(gc_time) > 1s", "cumulative"),
    ("max(nope) > 1s", "figure 'nope' is unknown"),
    ("rows_behind > 1M; DROP DATABASE x", "not understood"),
    ('rows_behind > 1M" OR "1"="1', "not understood"),
    ("rows_behind = 1M", "not understood"),
    ("max(rows_behind > 1M", "not understood"),
    ("rows_behind > 1e400", "'1e400' is not a number"),
    ("rows_behind > " + "9" * 400, "longer than 100"),
    ("batch_duration\n> trigger\x00", "not understood"),
])
def test_bad_figure_conditions_say_why(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_condition(text)


def test_figure_versus_figure_breaches_when_most_batches_meet_it():
    c = parse_condition("batch_duration > trigger")
    assert c.breached(0.8) and not c.breached(0.5) and not c.breached(0.2) and not c.breached(None)
    assert c.format_value(0.75) == "75 % of batches"
    assert parse_condition("rows_behind > 1M").format_value(2_500_000) == "2,500,000 rows"
    assert parse_condition("max(batch_duration) > 1s").format_value(1.5e9) == "1.5 s"
    assert parse_condition("state_memory > 1GB").format_value(2.5e9) == "2.5 GB"


def test_scopes_of_figures_validate_and_round_trip():
    r = Rule.from_dict({"name": "kafka-lag", "condition": "rows_behind > 1M", "job": "orders",
                        "query": "orders", "source": "0:KafkaV2", "window": "2m"})
    assert (r.step, r.pipeline, r.worker, r.source, r.operator) == (None, None, None, "0:KafkaV2", None)
    assert Rule.from_dict(r.to_dict()) == r
    assert r.summary() == "job orders · query orders · source 0:KafkaV2: rows_behind > 1M over 2m"
    op = Rule.from_dict({"name": "late", "condition": "late_rows > 0", "operator": "0:stateStoreSave"})
    assert op.scope_text() == "any job · operator 0:stateStoreSave"
    heap = Rule.from_dict({"name": "heap", "condition": "heap_used > 1GB", "app": "local-1764", "executor": "driver"})
    assert heap.scope_text() == "app local-1764 · executor driver" and Rule.from_dict(heap.to_dict()) == heap
    # a latency rule is as it was: its default step, no figure scope written
    lat = Rule.from_dict({"name": "e2e", "condition": "p99 > 5ms"})
    assert lat.step == "start-to-end" and "source" not in lat.to_dict()


@pytest.mark.parametrize("extra, reason", [
    ({"step": "sink"}, "figure of a Spark query: leave step, pipeline and worker empty"),
    ({"pipeline": "orders"}, "leave step, pipeline and worker empty"),
    ({"source": "0:Kafka", "operator": "0:stateStoreSave"}, "a source or an operator, not both"),
    ({"condition": "batch_duration > 1s", "source": "0:Kafka"}, "batch_duration has no per-source value"),
    ({"condition": "rows_behind > 1M", "operator": "0:x"}, "rows_behind has no per-operator value"),
    ({"condition": "files_behind > rows_behind"}, "compare figures written together"),
    ({"condition": "heap_used > 1GB", "job": "r1"}, "figure of an executor: scope it with app and executor"),
    ({"app": "local-1"}, "app scope an executor's figures"),
    ({"condition": "p99 > 5ms", "source": "0:Kafka"}, "source scope a Spark query's figures"),
    ({"condition": "backlog > 1M", "operator": "0:x"}, "operator scope a Spark query's figures"),
    ({"source": "../etc"}, "looks like a path"),
    ({"source": "0:Kafka\n"}, "control character"),
    ({"query": "q" * 201}, "at most 200"),
    ({"job": "a b"}, "job .* may use only"),
])
def test_bad_figure_scopes_say_why(extra, reason):
    with pytest.raises(ValueError, match=reason):
        Rule.from_dict({"name": "x", "condition": "rows_behind > 1M", **extra})


def figure_query(rule: Rule, start_ns: int, end_ns: int) -> tuple[str, dict]:
    """The InfluxQL the InfluxDB reader runs for a rule's figure request."""
    return figure_influxql(figure_request(rule, start_ns, end_ns))


def test_a_request_names_catalogue_fields_and_holds_user_values_in_its_scope_only():
    r = Rule.from_dict({"name": "x", "condition": "rows_behind > 1M", "job": "orders", "query": "q'1",
                        "source": "0:Kafka"})
    req = figure_request(r, 0, 60 * S)
    assert (req.measurement, req.field, req.aggregate) == ("spark_source", "rows_behind", "mean")
    assert dict(req.scope) == {"run": "orders", "query": "q'1", "source": "0:Kafka"}
    assert req.group == ("run", "query", "source") and not req.steady
    req = figure_request(Rule.from_dict({"name": "x", "condition": "p99.9 > 5ms", "pipeline": "orders"}), 0, S)
    assert (req.measurement, req.field, req.aggregate, req.histograms) == ("latency", "hdr", "p99.9", True)
    assert dict(req.scope) == {"step": "start-to-end", "pipeline": "orders"} and req.group == ()
    req = figure_request(Rule.from_dict({"name": "x", "condition": "backlog > 1M", "job": "j"}), 0, S)
    assert (req.measurement, req.field, dict(req.scope)) == ("backpressure", "backlog", {"run": "j", "step": "job"})
    req = figure_request(Rule.from_dict({"name": "x", "condition": "throughput < 10k/s"}), 0, S)
    assert (req.field, req.aggregate) == ("count", "per_second")
    req = figure_request(Rule.from_dict({"name": "x", "condition": "batch_duration > trigger"}), 0, S)
    assert (req.field, req.against, req.op, req.steady) == ("batch_ms", "trigger_ms", ">", True)
    assert [parse_condition(c).figure for c in ("p99 > 5ms", "throughput < 10k/s", "backlog > 1M",
                                                 "backpressure > 50%", "rows_behind > 1M", "status = failed")] == [
        "latency", "throughput", "backlog", "backpressure", "rows_behind", None]


def test_queries_bind_every_user_value_and_name_only_known_fields():
    hostile = 'x" OR "1"="1'
    r = Rule.from_dict({"name": "x", "condition": "rows_behind > 1M", "job": "orders", "query": hostile,
                        "source": "0:Kafka'); DROP"})
    q, params = figure_query(r, 0, 60 * S)
    assert hostile not in q and "DROP" not in q
    assert params["query"] == hostile and params["source"] == "0:Kafka'); DROP" and params["run"] == "orders"
    assert q.startswith('SELECT mean("rows_behind") AS "value" FROM "spark_source" WHERE')
    assert q.endswith('GROUP BY "run", "query", "source"')
    q, _ = figure_query(Rule.from_dict({"name": "x", "condition": "p99.9(batch_duration) > 1s"}), 0, S)
    assert 'percentile("batch_ms", 99.9)' in q and '"spark_progress"' in q
    q, _ = figure_query(Rule.from_dict({"name": "x", "condition": "gc_time > 1s", "executor": "1"}), 0, S)
    assert 'spread("gc_time_ms")' in q and '"spark_executor"' in q and '"executor" = $executor' in q
    q, _ = figure_query(Rule.from_dict({"name": "x", "condition": "batch_duration > trigger"}), 0, S)
    assert q.count("SELECT") == 2 and '"batch_ms" > "trigger_ms"' in q
