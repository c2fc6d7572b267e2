"""Join two `rate` streams, impressions and clicks, on the ad id within an event-time range.

Every other ad is clicked: the clicks stream runs at half the rate and clicks ad
`2 * value`. Both sides have a watermark, and a click counts only when it comes between
`--before-s` seconds before and `--within-s` seconds after its impression, so Spark can
drop join state that no later row can match. Joined rows are appended to Parquet.

What it shows on the monitor: two sources (input rows/s of each), batch duration against
the trigger, the join's state rows and memory (`symmetricHashJoin`), the watermark (the
lower of the two sides'), and rows dropped as late.

    python examples/stream_join.py --duration 60
    marketspread watch -- examples/stream_join.py --duration 60   # with the monitor
    python examples/stream_join.py --slow-ms 1500                 # batches overrun the trigger

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

NAME = "stream_join"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    p = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60, help="seconds to run from the first rows (0: until Ctrl-C)")
    p.add_argument("--rate", type=int, default=1000, help="impressions per second (clicks: half as many)")
    p.add_argument("--trigger-ms", type=int, default=1000, help="processing-time trigger (0: back to back)")
    # The system temp dir, not the current folder: an example must not litter the user's
    # checkout, and its checkpoint is throw-away (pass --work-dir to keep and resume it).
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "spark-examples" / NAME)
    p.add_argument("--slow-ms", type=int, default=0, help="sleep this long in each partition of each batch")
    p.add_argument("--master", help="Spark master (default local[2], unless spark-submit set one)")
    p.add_argument("--progress-out", type=Path, help="also write Spark's progress of every batch here (JSON)")
    p.add_argument("--watermark-s", type=int, default=10, help="watermark delay of both sides")
    p.add_argument("--before-s", type=int, default=5, help="a click may be stamped this long before its impression")
    p.add_argument("--within-s", type=int, default=30, help="and this long after it")
    args = p.parse_args(argv)
    if args.rate < 2 or args.trigger_ms < 0 or args.duration < 0 or args.slow_ms < 0:
        p.error("--rate must be >= 2; --trigger-ms, --duration and --slow-ms >= 0")
    return args


def master_of(flag: str | None) -> str | None:
    """Return the master to set: the flag's, else local[2] unless a launcher already chose one."""
    # spark-submit starts the JVM (with its --master or spark-defaults' spark.master) before
    # Python and passes its gateway port down: setting a master here would override the user's.
    launched = "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return flag or (None if launched else "local[2]")


def sleep_in_batches(slow_ms: int):
    """Return a mapInPandas function that sleeps once per partition, then passes rows on."""
    def slow(batches):
        time.sleep(slow_ms / 1000)
        yield from batches
    return slow


def start_query(spark: SparkSession, args: argparse.Namespace):
    """Start the impressions-clicks join; return the running query."""
    def rate(rows_per_s: int):
        return (spark.readStream.format("rate").option("rowsPerSecond", rows_per_s)
                .option("numPartitions", 2).load())

    impressions = rate(args.rate).select(F.col("value").alias("imp_ad"), F.col("timestamp").alias("imp_time"))
    if args.slow_ms:
        impressions = impressions.mapInPandas(sleep_in_batches(args.slow_ms), impressions.schema)
    clicks = rate(args.rate // 2).select((F.col("value") * 2).alias("click_ad"),
                                         F.col("timestamp").alias("click_time"))
    wm = f"{args.watermark_s} seconds"
    joined = (impressions.withWatermark("imp_time", wm)
              .join(clicks.withWatermark("click_time", wm),
                    F.expr(f"""click_ad = imp_ad AND
                               click_time >= imp_time - INTERVAL {args.before_s} SECONDS AND
                               click_time <= imp_time + INTERVAL {args.within_s} SECONDS"""))
              .select(F.col("imp_ad").alias("ad"), "imp_time", "click_time"))
    writer = (joined.writeStream.queryName(NAME).outputMode("append").format("parquet")
              .option("path", str(args.work_dir / "clicks"))
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
    builder = SparkSession.builder.appName(NAME)
    if master := master_of(args.master):
        builder = builder.master(master)
    # Two shuffle partitions: 200 (Spark's default) would mean 4 x 200 join state stores per
    # batch. No progress bar to bury the summary line.
    spark = (builder.config("spark.sql.shuffle.partitions", "2")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)   # `kill` stops as Ctrl-C does
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
        joined = spark.read.parquet(str(args.work_dir / "clicks")).count() if batches else 0
    except Exception:          # no batch wrote a file yet: nothing to read
        joined = 0
    spark.stop()
    if failure is not None:
        print(f"{NAME}: the query failed: {failure}", file=sys.stderr)
        return 1
    rows = sum(p["numInputRows"] for p in batches.values())
    if args.progress_out:       # Spark's own figures, for comparing runs (bench/monitor_overhead.py)
        args.progress_out.write_text(json.dumps({"progress": [batches[b] for b in sorted(batches)]}))
    print(f"{NAME}: {rows} rows (impressions and clicks) in {len(batches)} batches, "
          f"{joined} joined rows in {args.work_dir / 'clicks'} (parquet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
