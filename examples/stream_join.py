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
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from _common import (QueryRun, SizeFlag, example_parser, parquet_rows, parse_example_args, run_example,
                     sleep_in_batches, start_writer)

NAME = "stream_join"
RATE = SizeFlag("--rate", 1000, "impressions per second (clicks: half as many)", least=2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    p = example_parser(NAME, __doc__, RATE, slow_help="sleep this long in each partition of each batch")
    p.add_argument("--watermark-s", type=int, default=10, help="watermark delay of both sides")
    p.add_argument("--before-s", type=int, default=5, help="a click may be stamped this long before its impression")
    p.add_argument("--within-s", type=int, default=30, help="and this long after it")
    return parse_example_args(p, RATE, argv)


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
    return start_writer(joined.writeStream.queryName(NAME).outputMode("append").format("parquet")
                        .option("path", str(args.work_dir / "clicks")), args)


def summary(spark: SparkSession, args: argparse.Namespace, run: QueryRun) -> str:
    """Return the summary line: rows read from both sources, joined rows written."""
    joined = parquet_rows(spark, args.work_dir / "clicks") if run.batches else 0
    return (f"{NAME}: {run.rows} rows (impressions and clicks) in {len(run.batches)} batches, "
            f"{joined} joined rows in {args.work_dir / 'clicks'} (parquet)")


def main(argv: list[str] | None = None) -> int:
    """Run the query for --duration seconds, stop it cleanly and print one summary line."""
    # Two shuffle partitions: 200 (Spark's default) would mean 4 x 200 join state stores per batch.
    return run_example(NAME, parse_args(argv), start_query, summary, shuffle_partitions=2)


if __name__ == "__main__":
    sys.exit(main())
