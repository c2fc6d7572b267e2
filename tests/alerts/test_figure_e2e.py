"""A generic rule end to end: a real Spark streaming query whose batches overrun their trigger,
the real listener writing its figures to a real InfluxDB, the evaluator firing, and a local
HTTP server receiving the FIRING webhook."""
from __future__ import annotations

import time

import pytest

from alerts.evaluate import FIRING, OK
from alerts.evaluator import start_evaluator
from alerts.query import MetricReader
from alerts.rules import Rule
from alerts.store import RuleStore
from collector.influx import InfluxWriter
from spark_listener.listener import ListenerOptions, SessionHooks, SparkMetricsListener

from .webhook_server import WebhookReceiver

TRIGGER_MS = 200
QUERY = "alerts_overrun"


def _slow_batch(_df, _batch_id) -> None:
    time.sleep(0.5)             # each batch takes longer than the 200 ms trigger


def test_overrunning_query_fires_a_generic_rule_and_its_webhook(spark, influx_client, monkeypatch, tmp_path):
    monkeypatch.setenv("MS_WEBHOOK_ALLOW", "127.0.0.1")     # the local receiver: an allowed internal target
    state = tmp_path / "state"
    store = RuleStore(state / "alerts" / "rules.json")
    with WebhookReceiver() as hook, InfluxWriter(influx_client, tmp_path / "spool").start() as writer:
        store.put_all([
            Rule.from_dict({"name": "overrun", "condition": "batch_duration > trigger", "job": QUERY,
                            "window": "1m", "webhook": hook.url}),
            Rule.from_dict({"name": "never", "condition": "max(batch_duration) > 1h", "job": QUERY,
                            "window": "1m", "webhook": hook.url}),
        ])
        # the test knows the trigger it sets; the monitor reads it from the query for any job
        listener = SparkMetricsListener(QUERY, writer, hooks=SessionHooks(query_info=lambda _id: (TRIGGER_MS, {})),
                                        options=ListenerOptions(query_name=QUERY, poll_s=0.1)).start()
        spark.streams.addListener(listener)
        ev = start_evaluator(state, writer, client=influx_client, interval_s=1.0)
        assert ev is not None
        q = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .writeStream.queryName(QUERY).foreachBatch(_slow_batch)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime=f"{TRIGGER_MS} milliseconds")
             .start())
        try:
            fired = hook.next(timeout=90)
        finally:
            q.stop()
            ev.stop()
            listener.wait_terminated(10)
            spark.streams.removeListener(listener)
            listener.stop()
        assert (fired["rule"], fired["state"], fired["previous"]) == ("overrun", FIRING, OK)
        assert fired["condition"] == "batch_duration > trigger" and fired["scope"]["job"] == QUERY
        assert fired["value"] > 0.5 and fired["value_text"].endswith("% of batches")
        assert ev.states["never"].state == OK
        assert hook.received.empty()                           # `never` sent nothing

        # the figure equals Spark's own: the share of the query's batches longer than the trigger
        assert writer.flush(timeout=10) and listener.flush(timeout=10)
        progress = [p for p in q.recentProgress if p.batchDuration is not None]
        spark_share = sum(p.batchDuration > TRIGGER_MS for p in progress) / len(progress)
        rule = store.get("overrun")
        assert MetricReader(influx_client).value(rule, time.time_ns()) == pytest.approx(spark_share)
        assert spark_share > 0.5
