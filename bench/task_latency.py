"""What `record_latency` and `timed_step` cost a user's Spark tasks.

    .venv/bin/python -m bench.task_latency [--rows 1000000] [--batch-rows 1000,10000]
                                           [--spark-seconds 30] [--rate 20000]

Two figures:

1. CPU per million rows, in this process without Spark: the wrappers' functions run over
   Arrow batches (`record_latency`) or pandas frames (`timed_step`) as Spark's Python
   worker would hand them (10,000 rows per batch is Spark's default), against the same
   pass-through without recording; the difference is the recorders' cost. Each run ends
   with the task's one spool write.
2. Batch duration on a `rate` source (local[2], 1-s trigger, `noop` sink): two
   pass-through `mapInArrow` hops against `record_latency` + a `timed_step`-wrapped
   `mapInArrow` hop, the same number of Python hops; medians of `addBatch` over the
   batches after the first three.

Prints the figures and writes bench/out/task-latency-<UTC>.json (`--record`: bench/results/).
Timings are figures, never a pass/fail.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from bench.output import add_record_flag, result_path, shown, write_result
from engine.spark.session import build_session
from spark_listener.latency import record_latency, timed_step

REPEAT = 5


class _Capture:
    """Stands in for a DataFrame so the benchmark can run the function `record_latency` hands Spark."""

    def __init__(self, schema):
        self.schema = schema

    def mapInArrow(self, fn, schema):  # noqa: N802 - Spark's name
        return fn


def _arrow_batches(rows: int, batch_rows: int) -> list[pa.RecordBatch]:
    now_us = time.time_ns() // 1000
    rng = np.random.default_rng(1)
    out = []
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        ts = pa.array(now_us - rng.integers(1_000, 5_000_000, n), pa.timestamp("us", tz="UTC"))
        out.append(pa.RecordBatch.from_arrays([ts, pa.array(np.arange(n, dtype=np.int64))], ["timestamp", "value"]))
    return out


def _cpu(fn, batches) -> float:
    """Return the median CPU seconds of draining `fn(iter(batches))`."""
    times = []
    for _ in range(REPEAT):
        t = time.process_time()
        for _ in fn(iter(batches)):
            pass
        times.append(time.process_time() - t)
    return statistics.median(times)


def cpu_per_million(rows: int, batch_rows: int, spool: Path) -> dict:
    """CPU ms per million rows of each recorder, over a pass-through's."""
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType  # lazy: only the Spark figure needs it
    schema = StructType([StructField("timestamp", TimestampType()), StructField("value", LongType())])
    batches = _arrow_batches(rows, batch_rows)
    frames = [b.to_pandas() for b in batches]

    def passthrough(it):
        yield from it

    record = record_latency(_Capture(schema), "timestamp", "bench_arrival", spool_dir=spool)
    timed = timed_step("bench_step", passthrough, spool_dir=spool)
    scale = 1e3 * 1e6 / rows
    base_arrow, base_pandas = _cpu(passthrough, batches), _cpu(passthrough, frames)
    return {"rows": rows, "batch_rows": batch_rows,
            "record_latency_cpu_ms_per_m_rows": round((_cpu(record, batches) - base_arrow) * scale, 2),
            "timed_step_cpu_ms_per_m_rows": round((_cpu(timed, frames) - base_pandas) * scale, 2),
            "passthrough_cpu_ms_per_m_rows": round(base_arrow * scale, 2)}


def _identity(batches):
    yield from batches


def _batch_ms(spark, rate: int, seconds: float, recorded: bool, spool: Path) -> dict:
    rows = spark.readStream.format("rate").option("rowsPerSecond", rate).option("numPartitions", 2).load()
    if recorded:
        df = record_latency(rows, "timestamp", "bench_arrival", spool_dir=spool)
        df = df.mapInArrow(timed_step("bench_step", _identity, spool_dir=spool), df.schema)
    else:
        df = rows.mapInArrow(_identity, rows.schema).mapInArrow(_identity, rows.schema)
    name = "bench_recorded" if recorded else "bench_plain"
    query = df.writeStream.format("noop").queryName(name).trigger(processingTime="1 second").start()
    time.sleep(seconds)
    query.stop()
    batches = [p for p in query.recentProgress if p["numInputRows"]][3:]
    add = [p["durationMs"].get("addBatch", 0) for p in batches]
    return {"batches": len(batches), "rows_per_batch": statistics.median(p["numInputRows"] for p in batches) if batches else 0,
            "add_batch_ms_median": statistics.median(add) if add else None,
            "add_batch_ms_p90": round(float(np.percentile(add, 90)), 1) if add else None}


def main(argv: list[str] | None = None) -> int:
    """Measure, print and save the figures."""
    p = argparse.ArgumentParser(prog="python -m bench.task_latency", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch-rows", default="1000,10000")
    p.add_argument("--spark-seconds", type=float, default=30, help="per variant (0: skip the Spark figure)")
    p.add_argument("--rate", type=int, default=20_000, help="rows/s of the rate source")
    add_record_flag(p)
    args = p.parse_args(argv)
    result: dict = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": [], "spark": {}}
    with tempfile.TemporaryDirectory() as tmp:
        spool = Path(tmp)
        for b in (int(x) for x in args.batch_rows.split(",")):
            fig = cpu_per_million(args.rows, b, spool)
            result["cpu"].append(fig)
            print(f"{b:>6} rows/batch: record_latency {fig['record_latency_cpu_ms_per_m_rows']:8.1f} ms CPU per M rows, "
                  f"timed_step {fig['timed_step_cpu_ms_per_m_rows']:8.1f} (pass-through alone "
                  f"{fig['passthrough_cpu_ms_per_m_rows']:.1f})")
        if args.spark_seconds:
            spark = build_session("local[2]", app_name="bench-task-latency", shards=2)
            try:
                for recorded in (False, True, False, True):     # alternated: the machine drifts
                    fig = _batch_ms(spark, args.rate, args.spark_seconds, recorded, spool)
                    result["spark"].setdefault("recorded" if recorded else "plain", []).append(fig)
                    print(f"rate {args.rate}/s, {'recorded' if recorded else 'plain   '}: addBatch median "
                          f"{fig['add_batch_ms_median']} ms, p90 {fig['add_batch_ms_p90']} ms over {fig['batches']} batches "
                          f"of {fig['rows_per_batch']} rows")
            finally:
                spark.stop()
    out = write_result(result, result_path("task-latency", args.record))
    print(f"wrote {shown(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
