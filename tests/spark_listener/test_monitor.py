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
    with monitor(spark, name="api-run", writer=w, spool_dir=tmp_path / "spool") as mon:
        assert isinstance(mon, SparkMonitor) and mon.listener is not None
        named = _rate_query(spark, "orders enrichment", tmp_path)
        unnamed = _rate_query(spark, None, tmp_path, trigger="1 second")
        _wait_batches(named, 4)
        _wait_batches(unnamed, 2)
        named.stop()
        unnamed.stop()
        mon.listener.wait_terminated(10)
        time.sleep(0.5)
    runs = {p.tags["run"]: p for p in w.measurement("runs") if p.fields.get("status") == "stopped"}
    assert set(runs) == {"orders_enrichment", "api-run"}          # the query's name, else monitor's run
    assert runs["orders_enrichment"].tags["query"] == "orders enrichment"
    assert runs["api-run"].tags["query"] == str(unnamed.id)
    starts = {p.tags["run"]: p.fields for p in w.measurement("runs") if p.fields.get("status") == "running"}
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
    with monitor(spark, name="nulls", writer=w, spool_dir=spool) as mon:
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
    with monitor(spark, name="batch-run", writer=w, spool_dir=spool):
        df = spark.range(0, 120, numPartitions=3).withColumn("ts", F.current_timestamp())
        assert record_latency(df, "ts", "batch_step", spool_dir=spool).count() == 120
    points = [p for p in w.measurement("latency") if p.tags["step"] == "batch_step"]
    assert {p.tags["pipeline"] for p in points} == {"batch"}
    assert {p.tags["run"] for p in points} == {spark.sparkContext.applicationId}   # the tasks' own run
    assert sum(p.fields["count"] for p in points) == 120                      # every row, once
    assert not any((spool / "_unbatched").iterdir())


@pytest.mark.slow                 # three streaming queries on the shared session, ~20 s
def test_every_end_of_a_run_is_recorded(spark, tmp_path):
    """An availableNow query that ran out of input finished; a query whose foreachBatch raised
    failed with its reason; a query still running when the monitor stops is stopped."""
    def fails(df, batch_id):
        if batch_id >= 1:
            raise RuntimeError(f"bad batch {batch_id}: the upstream table is gone")

    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "a.txt").write_text("x\ny\n")
    w = MemoryWriter()
    with monitor(spark, name="ends", writer=w, spool_dir=tmp_path / "spool") as mon:
        once = (spark.readStream.text(str(inbox)).writeStream.queryName("drain").format("noop")
                .option("checkpointLocation", str(tmp_path / "ck-drain")).trigger(availableNow=True).start())
        once.awaitTermination(60)
        failing = (spark.readStream.format("rate").option("rowsPerSecond", 10).load().writeStream
                   .queryName("failing").foreachBatch(fails).trigger(processingTime="200 milliseconds")
                   .option("checkpointLocation", str(tmp_path / "ck-failing")).start())
        with pytest.raises(Exception):
            failing.awaitTermination(60)
        running = _rate_query(spark, "left running", tmp_path)
        _wait_batches(running, 1)
        assert len(mon.listener.open_run_ids) == 1
    running.stop()
    rows = {}
    for p in w.measurement("runs"):
        rows.setdefault((p.tags["query"], p.tags["run_id"]), {}).update(p.fields)
    ends = {q: f for (q, _), f in rows.items()}
    assert {q: f["status"] for q, f in ends.items()} == {"drain": "finished", "failing": "failed",
                                                        "left running": "stopped"}
    f = ends["failing"]
    assert f["error"] == "RuntimeError: bad batch 1: the upstream table is gone"
    assert f["error_class"] == "RuntimeError" and "test_monitor.py:" in f["error_trace"]
    assert all(f["end_ns"] >= f["start_ns"] and f["last_seen_ns"] >= f["start_ns"] for f in ends.values())
    assert {(p.tags["query"], p.tags["run_id"]) for p in w.measurement("spark_progress")} <= set(rows)
    assert all(p.tags["query_id"] == str(running.id) for p in w.measurement("spark_progress")
               if p.tags["query"] == "left running")


def test_a_session_built_without_the_metrics_sink_says_once_how_to_get_executor_figures(spark, tmp_path, caplog):
    assert not spark.sparkContext.getConf().get("spark.metrics.conf.*.sink.graphite.port", None)
    with caplog.at_level("INFO", logger="spark_listener.monitor"):
        with monitor(spark, name="no-sink", writer=MemoryWriter(), spool_dir=tmp_path / "spool"):
            pass
    said = [r.getMessage() for r in caplog.records if "executor_metrics_conf()" in r.getMessage()]
    assert len(said) == 1 and "SparkSession.builder.config(map=executor_metrics_conf())" in said[0]


def test_the_monitor_follows_its_sessions_stop_only_while_it_runs(spark, tmp_path):
    sc = spark.sparkContext
    with monitor(spark, name="a", writer=MemoryWriter(), spool_dir=tmp_path / "a"):
        assert "stop" in vars(sc)                   # spark.stop() stops the monitor first
        with monitor(spark, name="b", writer=MemoryWriter(), spool_dir=tmp_path / "b"):
            pass
        assert "stop" in vars(sc)                   # the inner one left the outer's in place
    assert "stop" not in vars(sc)                   # the context's own method again


def test_run_is_the_former_name_of_name(spark, tmp_path):
    with pytest.warns(DeprecationWarning, match="name="):
        mon = monitor(spark, run="old-style", writer=MemoryWriter(), spool_dir=tmp_path / "spool", alerts=False)
    try:
        assert mon.name == mon.run == "old-style"
    finally:
        mon.stop()


@pytest.mark.slow                 # a streaming query on the shared session, ~10 s
def test_a_jobs_adapter_gives_its_run_steps_and_held_back_share(spark, tmp_path):
    """What a job adds of itself reaches its points; the monitor asks nothing of its name."""
    from spark_listener import JobAdapter
    asked = []

    def held_back(window_s):
        asked.append(window_s)
        return 0.3

    adapter = JobAdapter(run="run-7", held_back_share=held_back, state_size=lambda: (11, 2048),
                         steps=("parse", "check"), run_fields={"ingress": "tcp"})
    w = MemoryWriter()
    with monitor(spark, name="ignored", adapter=adapter, writer=w, spool_dir=tmp_path / "spool", alerts=False) as mon:
        q = _rate_query(spark, "adapted", tmp_path, trigger="0 seconds")     # no trigger: no overrun to count
        _wait_batches(q, 3)
        hooked = []
        assert mon.add_progress_hook(hooked.append)
        _wait_batches(q, 5)
        q.stop()
        mon.listener.wait_terminated(10)
    start = next(p for p in w.measurement("runs") if p.fields.get("status") == "running")
    assert start.tags["run"] == "run-7" and start.tags["query"] == "adapted"   # every query under the job's run
    assert start.fields["steps"] == '["parse", "check"]' and start.fields["ingress"] == "tcp"
    assert {p.tags["run"] for p in w.measurement("spark_progress")} == {"run-7"}
    assert all(p.fields["state_rows"] == 11 and p.fields["state_memory_bytes"] == 2048
               for p in w.measurement("spark_progress"))             # no state operator: the job's own state
    bp = w.measurement("backpressure")
    assert bp and all(p.fields["backpressured_share"] == 0.3 and p.fields["status"] == "LOW" for p in bp)
    assert asked and set(asked) == {10.0} and hooked
