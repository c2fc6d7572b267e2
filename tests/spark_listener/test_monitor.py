"""`monitor(spark)`: two lines attach the product to a session; every query gets its figures."""
from __future__ import annotations

import time

import pytest

from collector.influx import InfluxConfig
from collector.testing import MemoryWriter
from spark_listener import monitor
from spark_listener.monitor import SparkMonitor


def _rate_query(spark, name: str | None, tmp_path, trigger: str = "500 milliseconds", rate: int = 200):
    w = spark.readStream.format("rate").option("rowsPerSecond", rate).load().writeStream.format("noop")
    if name:
        w = w.queryName(name)
    return w.option("checkpointLocation", str(tmp_path / f"ck-{name}")).trigger(processingTime=trigger).start()


def _wait_batches(q, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len([p for p in q.recentProgress if p.numInputRows]) < n and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.mark.slow                 # two streaming queries on the shared session, ~15 s
def test_every_query_of_the_session_gets_its_figures(spark, tmp_path):
    w = MemoryWriter()
    with monitor(spark, run="api-run", writer=w, spool_dir=tmp_path / "spool") as mon:
        assert isinstance(mon, SparkMonitor) and mon.listener is not None
        named = _rate_query(spark, "orders enrichment", tmp_path)
        unnamed = _rate_query(spark, None, tmp_path, trigger="1 second")
        _wait_batches(named, 4)
        _wait_batches(unnamed, 2)
        named.stop()
        unnamed.stop()
        mon.listener.wait_terminated(10)
        time.sleep(0.5)
    runs = {p.tags["run"]: p for p in w.measurement("runs") if p.fields["status"] == "finished"}
    assert set(runs) == {"orders_enrichment", "api-run"}          # the query's name, else monitor's run
    assert runs["orders_enrichment"].tags["query"] == "orders enrichment"
    assert runs["api-run"].tags["query"] == str(unnamed.id)
    starts = {p.tags["run"]: p.fields for p in w.measurement("runs") if p.fields["status"] == "running"}
    assert starts["orders_enrichment"]["app_id"] == spark.sparkContext.applicationId
    assert starts["orders_enrichment"]["trigger_ms"] == 500 and starts["api-run"]["trigger_ms"] == 1000
    progress = [p for p in w.measurement("spark_progress") if p.tags["run"] == "orders_enrichment"]
    assert len(progress) >= 4 and all(p.fields["trigger_ms"] == 500 for p in progress)
    ours = {p.fields["batch_id"]: p.fields for p in progress}
    for sp in named.recentProgress:
        assert ours[sp.batchId]["input_rows"] == sp.numInputRows
    assert [p.tags["source"] for p in w.measurement("spark_source")][:1] == ["0:RateStreamV2"]
    assert not any(spark.streams.active)


def test_a_monitor_that_cannot_start_leaves_the_job_alone(spark, tmp_path, caplog):
    bad = tmp_path / "file-not-folder"
    bad.write_text("x")
    with caplog.at_level("ERROR"):
        mon = monitor(spark, state_dir=bad / "state", spool_dir=bad / "spool",
                      influx=InfluxConfig(url="http://127.0.0.1:9"))
    assert mon.listener is None
    assert any("not attached" in r.getMessage() for r in caplog.records)
    mon.stop()
    assert spark.range(3).count() == 3            # the session works on


@pytest.mark.slow                 # a streaming query on the shared session, ~10 s
def test_rows_a_step_could_not_time_are_counted_not_lost(spark, tmp_path):
    from pyspark.sql import functions as F

    from spark_listener import record_latency
    w = MemoryWriter()
    spool = tmp_path / "spool"
    with monitor(spark, run="nulls", writer=w, spool_dir=spool) as mon:
        rows = spark.readStream.format("rate").option("rowsPerSecond", 100).load()
        stamped = record_latency(rows.withColumn("ts", F.lit(None).cast("timestamp")), "ts", "null-stamps",
                                 spool_dir=spool)
        q = (stamped.writeStream.queryName("null stamps").format("noop").trigger(processingTime="500 milliseconds")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
        _wait_batches(q, 3)
        q.stop()
        mon.listener.wait_terminated(10)
    uncounted = w.measurement("latency_uncounted")
    assert uncounted and {p.tags["step"] for p in uncounted} == {"null-stamps"}
    seen = {p.fields["batch_id"]: p.fields["input_rows"] for p in w.measurement("spark_progress")}
    assert sum(p.fields["nulls"] for p in uncounted) == sum(seen.values()) > 0     # every row, none timed
    assert not w.measurement("latency")


def test_a_batch_jobs_step_samples_ship_under_its_own_run(spark, tmp_path):
    """Tasks outside any streaming query (a batch DataFrame through record_latency) are shipped too, once."""
    from pyspark.sql import functions as F

    from spark_listener import record_latency
    w = MemoryWriter()
    spool = tmp_path / "spool"
    with monitor(spark, run="batch-run", writer=w, spool_dir=spool):
        df = spark.range(0, 120, numPartitions=3).withColumn("ts", F.current_timestamp())
        assert record_latency(df, "ts", "batch_step", spool_dir=spool).count() == 120
    points = [p for p in w.measurement("latency") if p.tags["step"] == "batch_step"]
    assert {p.tags["pipeline"] for p in points} == {"batch"}
    assert {p.tags["run"] for p in points} == {spark.sparkContext.applicationId}   # the tasks' own run
    assert sum(p.fields["count"] for p in points) == 120                      # every row, once
    assert not any((spool / "_unbatched").iterdir())
