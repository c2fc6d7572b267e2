"""record_latency and timed_step in a real Spark streaming query: each committed row counts once per step."""
from __future__ import annotations

import time

import pandas as pd
import pytest
from pyspark.sql import functions as F

from collector import task_spool
from collector.names import InvalidName
from spark_listener.latency import declared_steps, record_latency, timed_group_step, timed_step

SLEEP_S = 0.05


def _slow_enrich(batches):
    for pdf in batches:
        time.sleep(SLEEP_S)               # the deliberately slowed step
        yield pdf.assign(value=pdf["value"] * 2)


def _totals(samples):
    out: dict[str, int] = {}
    for s in samples:
        out[s.step] = out.get(s.step, 0) + s.counts.total
    return out


@pytest.mark.slow
def test_each_committed_batch_counts_its_rows_once_per_step(spark, tmp_path):
    spool = tmp_path / "spool"
    rows = spark.readStream.format("rate").option("rowsPerSecond", 40).option("numPartitions", 2).load()
    arrived = record_latency(rows, "timestamp", "arrival", spool_dir=spool)
    enriched = arrived.mapInPandas(timed_step("enrich", _slow_enrich, spool_dir=spool), arrived.schema)
    query = (enriched.writeStream.format("noop").queryName("latency_test")
             .trigger(processingTime="500 milliseconds").start())
    try:
        deadline = time.time() + 60
        while time.time() < deadline and sum(p["numInputRows"] > 0 for p in query.recentProgress) < 3:
            time.sleep(0.5)
    finally:
        query.stop()
    progress = query.recentProgress
    assert sum(p["numInputRows"] > 0 for p in progress) >= 3
    steps = declared_steps()
    assert steps.index("arrival") < steps.index("enrich")
    enrich_samples = []
    for p in progress:
        samples = task_spool.collect_batch(spool, query.id, p["batchId"])
        totals = _totals(samples)
        n = p["numInputRows"]
        assert totals.get("arrival", 0) == n and totals.get("enrich", 0) == n, (p["batchId"], totals, n)
        assert all(s.pipeline == "" and s.worker.split("/p")[-1].isdigit() for s in samples)
        enrich_samples += [s for s in samples if s.step == "enrich"]
    assert not (spool / query.id / str(progress[-1]["batchId"])).exists()
    slowest_p50 = min(s.counts.percentiles([50])[50] for s in enrich_samples)
    assert slowest_p50 >= SLEEP_S * 1e9                  # every partition's p50 reflects the sleep


def test_a_string_or_missing_column_or_bad_step_is_refused_on_the_driver(spark, tmp_path):
    df = spark.range(3).withColumn("ts", F.lit("2025-01-01"))
    with pytest.raises(TypeError, match="timestamp column"):
        record_latency(df, "ts", "arrival", spool_dir=tmp_path)
    with pytest.raises(TypeError, match="unit="):
        record_latency(df, "id", "arrival", spool_dir=tmp_path)
    with pytest.raises(ValueError, match="no column"):
        record_latency(df, "nope", "arrival", spool_dir=tmp_path)
    for bad in ("", "has space", "../up", "a/b", "x" * 300, 7):
        with pytest.raises(InvalidName):
            timed_step(bad, _slow_enrich)
    assert not any(s in declared_steps() for s in ("has space", "a/b"))


def test_steps_are_declared_in_call_order_first_declaration_wins(spark, tmp_path):
    df = spark.range(3).withColumn("ts", F.current_timestamp())
    timed_step("order_b", _slow_enrich, spool_dir=tmp_path)
    record_latency(df, "ts", "order_a", spool_dir=tmp_path)
    timed_step("order_b", _slow_enrich, spool_dir=tmp_path)       # declared again: keeps its place
    with pytest.raises(TypeError):
        record_latency(df, "id", "order_refused", spool_dir=tmp_path)
    steps = declared_steps()
    assert [s for s in steps if s.startswith("order_")] == ["order_b", "order_a"]


def test_an_all_null_column_records_nothing_and_the_job_goes_on(spark, tmp_path):
    df = spark.range(0, 50, numPartitions=2).withColumn("ts", F.lit(None).cast("timestamp"))
    out = record_latency(df, "ts", "nulls_step", spool_dir=tmp_path).collect()
    assert sorted(r.id for r in out) == list(range(50))
    (got,) = task_spool.collect_unbatched(tmp_path).values()    # no streaming batch: shipped on sight
    assert got.samples == () and got.uncounted["nulls_step"].nulls == 50


def test_long_epoch_columns_and_future_timestamps(spark, tmp_path):
    now_ms = int(time.time() * 1000)
    df = spark.range(0, 100, numPartitions=2).withColumn(
        "sent_ms", F.when(F.col("id") < 90, F.lit(now_ms - 5000)).otherwise(F.lit(now_ms + 3_600_000)))
    assert record_latency(df, "sent_ms", "epoch_step", spool_dir=tmp_path, unit="ms").count() == 100
    (got,) = task_spool.collect_unbatched(tmp_path).values()
    assert _totals(got.samples) == {"epoch_step": 90}
    assert got.uncounted["epoch_step"].negative == 10               # an hour ahead: clock skew, not recorded
    p50 = got.samples[0].counts.percentiles([50])[50]
    assert 5e9 <= p50 < 60e9


def test_timed_group_step_times_applyInPandasWithState(spark, tmp_path):
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count_group(key, pdfs, state):
        n = sum(len(p) for p in pdfs)
        yield pd.DataFrame({"k": [key[0]], "n": [n]})

    source = tmp_path / "in"
    source.mkdir()
    pd.DataFrame({"k": [i % 3 for i in range(30)], "v": range(30)}).to_json(
        source / "part.json", orient="records", lines=True)
    df = spark.readStream.schema("k long, v long").json(str(source))
    counted = df.groupBy("k").applyInPandasWithState(
        timed_group_step("count_group", count_group, spool_dir=tmp_path / "spool"),
        "k long, n long", "c long", "append", GroupStateTimeout.NoTimeout)
    query = (counted.writeStream.format("memory").queryName("group_step_test").outputMode("append")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert sorted(tuple(r) for r in spark.table("group_step_test").collect()) == [(0, 10), (1, 10), (2, 10)]
    batch = [p["batchId"] for p in query.recentProgress if p["numInputRows"]][0]
    samples = task_spool.collect_batch(tmp_path / "spool", query.id, batch)
    assert _totals(samples) == {"count_group": 3}       # one output row per group, each timed once


_RETRY_JOB = r'''
import json, sys
from pathlib import Path
from pyspark import TaskContext
from pyspark.sql import SparkSession, functions as F
from collector import task_spool
from spark_listener.latency import record_latency

work = Path(sys.argv[1])
spark = (SparkSession.builder.master("local[2,3]")          # up to 3 attempts per task
         .config("spark.ui.enabled", "false").getOrCreate())

def fail_first_attempt(batches):
    yield from batches
    tc = TaskContext.get()
    if tc.partitionId() == 0 and tc.attemptNumber() == 0:
        raise RuntimeError("first attempt fails after its rows went through the step")

rows = (spark.readStream.schema("id long, sent_ms long").json(str(work / "in"))
        .withColumn("ts", F.timestamp_millis("sent_ms")))
recorded = record_latency(rows, "ts", "arrival", spool_dir=work / "spool")
query = (recorded.mapInArrow(fail_first_attempt, recorded.schema).writeStream.format("noop")
         .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True).start())
query.awaitTermination(180)
out = []
for p in query.recentProgress:
    got = task_spool.collect_batch_figures(work / "spool", query.id, p["batchId"])
    out.append({"rows": p["numInputRows"], "recorded": sum(s.counts.total for s in got.samples),
                "superseded": got.superseded_files})
print(json.dumps(out))
spark.stop()
'''


@pytest.mark.slow
def test_a_retried_task_counts_its_rows_once(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    (tmp_path / "in").mkdir()
    now_ms = int(time.time() * 1000)
    for f in range(4):
        (tmp_path / "in" / f"{f}.json").write_text(
            "".join(f'{{"id": {f * 25 + i}, "sent_ms": {now_ms}}}\n' for i in range(25)))
    script = tmp_path / "retry_job.py"
    script.write_text(_RETRY_JOB)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "PYSPARK_PYTHON": sys.executable,
                                            "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-3000:]
    batches = [b for b in json.loads(done.stdout.strip().splitlines()[-1]) if b["rows"]]
    assert batches and all(b["recorded"] == b["rows"] for b in batches), batches
    assert sum(b["rows"] for b in batches) == 100
    assert sum(b["superseded"] for b in batches) >= 1          # the failed attempt wrote, and was dropped
