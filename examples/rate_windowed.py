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
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

NAME = "rate_windowed"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    p = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60, help="seconds to run from the first rows (0: until Ctrl-C)")
    p.add_argument("--rate", type=int, default=1000, help="rows per second of the rate source")
    p.add_argument("--trigger-ms", type=int, default=1000, help="processing-time trigger (0: back to back)")
    # The system temp dir, not the current folder: an example must not litter the user's
    # checkout, and its checkpoint is throw-away (pass --work-dir to keep and resume it).
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "spark-examples" / NAME)
    p.add_argument("--slow-ms", type=int, default=0, help="sleep this long in each partition of each batch")
    p.add_argument("--master", help="Spark master (default local[2], unless spark-submit set one)")
    p.add_argument("--progress-out", type=Path, help="also write Spark's progress of every batch here (JSON)")
    p.add_argument("--window-s", type=int, default=5, help="tumbling window length")
    p.add_argument("--watermark-s", type=int, default=2, help="how late a row may be and still count")
    p.add_argument("--late-every", type=int, default=20, help="every Nth row arrives late (0: none)")
    p.add_argument("--late-s", type=int, default=30, help="how late those rows are")
    args = p.parse_args(argv)
    if args.rate <= 0 or args.trigger_ms < 0 or args.duration < 0 or args.slow_ms < 0:
        p.error("--rate must be > 0; --trigger-ms, --duration and --slow-ms >= 0")
    return args


def master_of(flag: str | None) -> str | None:
    """Return the master to set: the flag's, else local[2] unless a launcher already chose one."""
    # spark-submit starts the JVM (with its --master or spark-defaults' spark.master) before
    # Python and passes its gateway port down: setting a master here would override the user's.
    launched = "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return flag or (None if launched else "local[2]")


def build_session(args: argparse.Namespace) -> SparkSession:
    """Build (or join) the Spark session, small enough for a laptop."""
    builder = SparkSession.builder.appName(NAME)
    master = master_of(args.master)
    if master:
        builder = builder.master(master)
    # Two shuffle partitions: 200 (Spark's default) would mean 200 state stores per batch.
    # No console progress bar: it would bury the summary line.
    return (builder.config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false").getOrCreate())


def sleep_in_batches(slow_ms: int):
    """Return a mapInPandas function that sleeps once per partition, then passes rows on."""
    def slow(batches):
        time.sleep(slow_ms / 1000)
        yield from batches
    return slow


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
    writer = (windows.writeStream.queryName(NAME).outputMode("append").format("parquet")
              .option("path", str(args.work_dir / "windows"))
              .option("checkpointLocation", str(args.work_dir / "checkpoint")))
    if args.trigger_ms:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    return writer.start()


def follow(query, duration_s: float, batches: dict[int, dict]) -> None:
    """Collect each batch's progress for `duration_s` after the first rows (0: forever), or until the query ends."""
    # Counted from the first batch with rows, not from the start: start-up (the JVM, the
    # first plan) takes 5 s on an idle laptop and three times that on a busy one.
    deadline = float("inf")
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.5)
        collect(query, batches)
        if duration_s > 0 and deadline == float("inf") and any(p["numInputRows"] for p in batches.values()):
            deadline = time.monotonic() + duration_s


def collect(query, batches: dict[int, dict]) -> None:
    """Add the progress reports Spark keeps (the last 100) to `batches`, by batch id."""
    for p in query.recentProgress:
        batches[p["batchId"]] = json.loads(p.json)


def stop_between_batches(query, wait_s: float = 10) -> None:
    """Stop the query once its current batch is done (waiting up to `wait_s`), so Spark commits it."""
    # stop() interrupts a running batch: its output may be written and its commit not, and
    # the next start replays it. Between two batches nothing is in flight.
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the query for --duration seconds, stop it cleanly and print one summary line."""
    args = parse_args(argv)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    spark = build_session(args)
    # `kill` (SIGTERM) stops the query as cleanly as Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    batches: dict[int, dict] = {}
    query = None
    try:
        query = start_query(spark, args)
        follow(query, args.duration, batches)
    except KeyboardInterrupt:
        print(f"{NAME}: interrupted, stopping the query after its current batch", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if query is not None:
            stop_between_batches(query)
            collect(query, batches)
        failure = query.exception() if query is not None else None
    try:
        windows = spark.read.parquet(str(args.work_dir / "windows")).count() if batches else 0
    except Exception:          # no batch wrote a file yet: nothing to read
        windows = 0
    spark.stop()
    if failure is not None:
        print(f"{NAME}: the query failed: {failure}", file=sys.stderr)
        return 1
    rows = sum(p["numInputRows"] for p in batches.values())
    late = sum(op.get("numRowsDroppedByWatermark", 0) for p in batches.values() for op in p["stateOperators"])
    if args.progress_out:       # Spark's own figures, for comparing runs (bench/monitor_overhead.py)
        args.progress_out.write_text(json.dumps({"progress": [batches[b] for b in sorted(batches)]}))
    print(f"{NAME}: {rows} rows in {len(batches)} batches, {late} late rows dropped, "
          f"{windows} windows written to {args.work_dir / 'windows'} (parquet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
