"""A real query's start-up batch (planning on a cold JVM, often several triggers long) trips no
`batch_duration > trigger` rule, even with `for: 0s`: real Spark, the real monitor, a real InfluxDB."""
from __future__ import annotations

import time

import pytest

from alerts.evaluate import OK
from alerts.evaluator import AlertEvaluator
from alerts.rules import Rule
from alerts.store import RuleStore
from collector.influx import InfluxClient, InfluxWriter
from collector.units import NS
from spark_listener.monitor import SparkMonitor
from spark_listener.records import parse_timestamp_ns


@pytest.mark.slow                   # a real query of a few batches, ~10 s
def test_a_start_up_batch_that_overran_fires_no_overrun_rule(spark, influx_client, tmp_path):
    from pyspark.sql import functions as F
    writer = InfluxWriter(InfluxClient(influx_client.config), tmp_path / "spool", interval=0.2).start()
    mon = SparkMonitor(spark, "startup-test", writer=writer, state_dir=tmp_path / "state",
                       spool_dir=tmp_path / "samples", alerts=False).start()
    rule = Rule.from_dict({"name": "overrun", "condition": "batch_duration > trigger", "job": "startup_q",
                           "window": "10s", "for": "0s"})
    store = RuleStore(tmp_path / "alerts" / "rules.json")
    store.put(rule)
    ev = AlertEvaluator(store, influx_client, writer, interval_s=1.0)
    # the first batch takes 1.5 s, as planning a query on a cold JVM does; the others a few ms
    rows = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    q = (rows.writeStream.queryName("startup_q").foreachBatch(lambda df, bid: time.sleep(1.5) if bid == 0 else None)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="1 second").start())
    try:
        deadline = time.monotonic() + 120
        while len(q.recentProgress) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        progress = q.recentProgress
    finally:
        q.stop()
        mon.stop()
        writer.close(10)
    assert progress[0]["batchDuration"] > 1000                           # the start-up batch overran its trigger
    assert all(p["batchDuration"] < 1000 for p in progress[1:4])
    # the evaluator at every half second of the run, from just after the first batch's start:
    # at first the start-up batch is the window's only batch, yet the rule stays OK (not even pending)
    t0 = parse_timestamp_ns(progress[0]["timestamp"])
    end = parse_timestamp_ns(progress[3]["timestamp"])
    states = []
    for now in range(t0 + NS // 2, end + NS, NS // 2):
        ev.evaluate_once(now)
        states.append(ev.states["overrun"].state if "overrun" in ev.states else OK)
    assert len(states) >= 6 and set(states) == {OK}, states
    points = influx_client.query('SELECT "batch_ms" FROM "spark_progress" WHERE "run" = $r AND "phase" = \'startup\'',
                                 {"r": "startup_q"})
    assert [len(s.values) for s in points] == [1]                        # the first batch, tagged
