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
import sqlite3
import sys
import time
from contextlib import closing
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from _common import QueryRun, SizeFlag, example_parser, parse_example_args, run_example, start_writer

NAME = "foreachbatch_sqlite"
RATE = SizeFlag("--rate", 1000, "rows per second of the rate source")
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
    """Read the command line (pass the same --work-dir again to resume from the checkpoint and database)."""
    p = example_parser(NAME, __doc__, RATE, slow_help="sleep this long in each batch, after its write")
    return parse_example_args(p, RATE, argv)


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
    return start_writer(rows.writeStream.queryName(NAME)
                        .foreachBatch(upsert_into(args.work_dir / "totals.sqlite", NAME, args.slow_ms)), args)


def summary(spark: SparkSession, args: argparse.Namespace, run: QueryRun) -> str:
    """Return the summary line: rows read this run, rows and keys in the database, replays skipped."""
    db = args.work_dir / "totals.sqlite"
    with closing(open_database(db)) as conn:
        stored, keys, skipped = conn.execute("SELECT coalesce(sum(rows), 0), count(*), (SELECT coalesce("
                                             "sum(replays_skipped), 0) FROM progress) FROM totals").fetchone()
    return (f"{NAME}: {run.rows} rows in {len(run.batches)} batches this run; {db} holds {stored} rows "
            f"over {keys} keys ({skipped} replayed batches skipped)")


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
    # Two shuffle partitions for the per-batch totals, not Spark's default 200.
    return run_example(NAME, args, start_query, summary, shuffle_partitions=2)


if __name__ == "__main__":
    sys.exit(main())
