"""Event-time windows over a `rate` stream, with a watermark that drops late rows.

What it shows on the monitor: throughput (input vs processed rows/s), batch duration
against the 1-s trigger, the aggregation's state rows and memory, the watermark and its
delay, and rows dropped as late (every `--late-every`th row is stamped `--late-s`
seconds in the past, behind the watermark). Output: 5-s tumbling windows (count and
average of `value` per key) appended to Parquet once the watermark closes them.

    python examples/rate_windowed.py --duration 60
    marketspread watch -- examples/rate_windowed.py --duration 60   # with the monitor
    python examples/rate_windowed.py --slow-ms 1500                 # batches overrun the trigger

A plain PySpark job: it never imports the monitoring product, which follows it from outside.
"""
from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from _common import (QueryRun, SizeFlag, example_parser, parquet_rows, parse_example_args, run_example,
                     sleep_in_batches, start_writer)

NAME = "rate_windowed"
RATE = SizeFlag("--rate", 1000, "rows per second of the rate source")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    p = example_parser(NAME, __doc__, RATE, slow_help="sleep this long in each partition of each batch")
    p.add_argument("--window-s", type=int, default=5, help="tumbling window length")
    p.add_argument("--watermark-s", type=int, default=2, help="how late a row may be and still count")
    p.add_argument("--late-every", type=int, default=20, help="every Nth row arrives late (0: none)")
    p.add_argument("--late-s", type=int, default=30, help="how late those rows are")
    return parse_example_args(p, RATE, argv)


def start_query(spark: SparkSession, args: argparse.Namespace):
    """Start the windowed aggregation; return the running query."""
    rows = (spark.readStream.format("rate").option("rowsPerSecond", args.rate)
            .option("numPartitions", 2).load())
    late = (F.col("value") % args.late_every == 0) if args.late_every > 0 else F.lit(False)
    # A little disorder for every row (< 2 s, inside the watermark) and a lot for the late ones.
    shift_us = F.when(late, F.lit(args.late_s * 1_000_000)).otherwise(F.col("value") * 7919 % 2_000_000)
    events = rows.select(F.timestamp_micros(F.unix_micros("timestamp") - shift_us).alias("event_time"),
                         # hashed, so the late rows (every Nth value) fall on every key, not one
                         F.pmod(F.xxhash64("value"), F.lit(10)).cast("int").alias("key"), "value")
    if args.slow_ms:
        events = events.mapInPandas(sleep_in_batches(args.slow_ms), events.schema)
    windows = (events.withWatermark("event_time", f"{args.watermark_s} seconds")
               .groupBy(F.window("event_time", f"{args.window_s} seconds"), "key")
               .agg(F.count("*").alias("rows"), F.avg("value").alias("avg_value"))
               .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                       "key", "rows", "avg_value"))
    # Parquet in append mode: a window is written once, when the watermark passes its end.
    return start_writer(windows.writeStream.queryName(NAME).outputMode("append").format("parquet")
                        .option("path", str(args.work_dir / "windows")), args)


def summary(spark: SparkSession, args: argparse.Namespace, run: QueryRun) -> str:
    """Return the summary line: rows read, late rows dropped, windows written."""
    late = sum(op.get("numRowsDroppedByWatermark", 0) for p in run.batches.values() for op in p["stateOperators"])
    windows = parquet_rows(spark, args.work_dir / "windows") if run.batches else 0
    return (f"{NAME}: {run.rows} rows in {len(run.batches)} batches, {late} late rows dropped, "
            f"{windows} windows written to {args.work_dir / 'windows'} (parquet)")


def main(argv: list[str] | None = None) -> int:
    """Run the query for --duration seconds, stop it cleanly and print one summary line."""
    # Two shuffle partitions: 200 (Spark's default) would mean 200 state stores per batch.
    return run_example(NAME, parse_args(argv), start_query, summary, shuffle_partitions=2)


if __name__ == "__main__":
    sys.exit(main())
