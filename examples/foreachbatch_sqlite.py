"""Upsert each micro-batch of a `rate` stream into a SQLite file, exactly once per batch.

`foreachBatch` hands every batch to plain Python: per-key row counts and sums are added to
`totals` (`INSERT ... ON CONFLICT DO UPDATE`) and the batch id to `progress`, in one
transaction. A batch Spark replays after a crash (offsets checkpointed, commit not) is
then already in the database: it is skipped and counted, never added twice.

On the monitor: throughput, batch duration against the trigger (`--slow-ms` overruns it).

    python examples/foreachbatch_sqlite.py --duration 60
    marketspread watch -- examples/foreachbatch_sqlite.py --duration 60   # with the monitor
    sqlite3 /tmp/spark-examples/foreachbatch_sqlite/totals.sqlite 'SELECT * FROM totals'

A plain PySpark job: it never imports the monitoring product, which follows it from outside.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

NAME = "foreachbatch_sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS totals (key INTEGER PRIMARY KEY, rows INTEGER NOT NULL,
                                   value_sum INTEGER NOT NULL, max_value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS progress (query TEXT PRIMARY KEY, batch_id INTEGER NOT NULL,
                                     replays_skipped INTEGER NOT NULL DEFAULT 0);
"""
UPSERT = """INSERT INTO totals (key, rows, value_sum, max_value) VALUES (?, ?, ?, ?)
ON CONFLICT (key) DO UPDATE SET rows = rows + excluded.rows, value_sum = value_sum + excluded.value_sum,
                                max_value = max(max_value, excluded.max_value)"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    p = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60, help="seconds to run from the first rows (0: until Ctrl-C)")
    p.add_argument("--rate", type=int, default=1000, help="rows per second of the rate source")
    p.add_argument("--trigger-ms", type=int, default=1000, help="processing-time trigger (0: back to back)")
    # The system temp dir, not the current folder: an example must not litter the user's
    # checkout. Pass the same --work-dir again to resume from the checkpoint and database.
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "spark-examples" / NAME)
    p.add_argument("--slow-ms", type=int, default=0, help="sleep this long in each batch, after its write")
    p.add_argument("--master", help="Spark master (default local[2], unless spark-submit set one)")
    p.add_argument("--progress-out", type=Path, help="also write Spark's progress of every batch here (JSON)")
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


def open_database(path: Path) -> sqlite3.Connection:
    """Open the database in autocommit mode (transactions are explicit) with its tables."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.executescript(SCHEMA)
    return conn


def apply_batch(path: Path, query: str, batch_id: int, totals: list[tuple[int, int, int, int]]) -> bool:
    """Add one batch's (key, rows, value_sum, max_value) to the totals unless it is already in; say if added."""
    # One write transaction for the batch-id check and the upsert: `with conn` commits it, or
    # rolls it back if anything fails.
    with closing(open_database(path)) as conn, conn:
        conn.execute("BEGIN IMMEDIATE")
        last = conn.execute("SELECT batch_id FROM progress WHERE query = ?", (query,)).fetchone()
        if last is not None and batch_id <= last[0]:
            conn.execute("UPDATE progress SET replays_skipped = replays_skipped + 1 WHERE query = ?", (query,))
            return False
        conn.executemany(UPSERT, totals)
        conn.execute("INSERT INTO progress (query, batch_id) VALUES (?, ?) "
                     "ON CONFLICT (query) DO UPDATE SET batch_id = excluded.batch_id", (query, batch_id))
        return True


def upsert_into(path: Path, query: str, slow_ms: int):
    """Return the foreachBatch function: per-key totals of the batch, applied once per batch id."""
    def upsert(batch, batch_id: int) -> None:
        totals = batch.groupBy("key").agg(F.count("*"), F.sum("value"), F.max("value")).collect()
        apply_batch(path, query, batch_id, [tuple(int(x) for x in row) for row in totals])
        # Sleeping after the write, before Spark commits the batch, widens the window in which
        # a crash makes Spark replay a batch the database already has: the case the guard is for.
        time.sleep(slow_ms / 1000)
    return upsert


def start_query(spark: SparkSession, args: argparse.Namespace):
    """Start the rate stream into SQLite; return the running query."""
    rows = (spark.readStream.format("rate").option("rowsPerSecond", args.rate)
            .option("numPartitions", 2).load()
            .select((F.col("value") % 10).alias("key"), "value"))
    writer = (rows.writeStream.queryName(NAME)
              .foreachBatch(upsert_into(args.work_dir / "totals.sqlite", NAME, args.slow_ms))
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
    db = args.work_dir / "totals.sqlite"
    try:                                 # a bad path fails here, before Spark starts
        open_database(db).close()
    except sqlite3.Error as e:
        print(f"{NAME}: cannot open {db}: {e}", file=sys.stderr)
        return 2
    builder = SparkSession.builder.appName(NAME)
    if master := master_of(args.master):
        builder = builder.master(master)
    # Two shuffle partitions for the per-batch totals; no progress bar to bury the summary.
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
        spark.stop()
    if failure is not None:
        print(f"{NAME}: the query failed: {failure}", file=sys.stderr)
        return 1
    with closing(open_database(db)) as conn:
        stored, keys, skipped = conn.execute("SELECT coalesce(sum(rows), 0), count(*), (SELECT coalesce("
                                             "sum(replays_skipped), 0) FROM progress) FROM totals").fetchone()
    rows = sum(p["numInputRows"] for p in batches.values())
    if args.progress_out:       # Spark's own figures, for comparing runs (bench/monitor_overhead.py)
        args.progress_out.write_text(json.dumps({"progress": [batches[b] for b in sorted(batches)]}))
    print(f"{NAME}: {rows} rows in {len(batches)} batches this run; {db} holds {stored} rows "
          f"over {keys} keys ({skipped} replayed batches skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
