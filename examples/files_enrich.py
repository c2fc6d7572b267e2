"""Files dropped in a folder, enriched with pandas, written to Parquet: with its steps' latencies.

A thread writes a small JSON-lines file into `<work-dir>/in` every 0.5 s, each row stamped
with the time it was written (`sent_ms`). The query reads new files each 1-s trigger and
records two latency steps in its own tasks with the product's recorders:

- `arrival`: `record_latency` on the writer's stamp: how long a row took from being
  written to reaching Spark's tasks (file listing, the trigger wait, planning);
- `enrich`: `timed_step` around the `mapInPandas` enrichment: how long the function took
  for each batch of rows (`--slow-ms` sleeps in it, a deliberately slowed step).

The output is Parquet under `<work-dir>/out`.

    marketspread watch -- examples/files_enrich.py --duration 60     # steps on the dashboard
    python examples/files_enrich.py --duration 60 --slow-ms 200      # the same job, unmonitored

Unlike the other examples this job imports the product (`spark_listener`): it is what a
user adds to their own job to see its steps. Unmonitored, the recorded samples wait in the
spool (`$MS_STATE_DIR/task-samples`) until a monitor sweeps them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from _common import QueryRun, SizeFlag, example_parser, parse_example_args, run_example, start_writer
from spark_listener import record_latency, timed_step

NAME = "files_enrich"
FILE_EVERY_S = 0.5
SCHEMA = "id long, sent_ms long, customer string, amount double"
ROWS_PER_FILE = SizeFlag("--rows-per-file", 100, "rows in each file the writer drops")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    p = example_parser(NAME, __doc__, ROWS_PER_FILE, slow_help="sleep this long in the enrichment, per batch")
    return parse_example_args(p, ROWS_PER_FILE, argv)


def write_files(folder: Path, rows_per_file: int, stop: threading.Event) -> None:
    """Drop a JSON-lines file into `folder` every 0.5 s until `stop`, each row stamped when written."""
    n = 0
    while not stop.wait(FILE_EVERY_S):
        sent_ms = int(time.time() * 1000)
        lines = (json.dumps({"id": n + i, "sent_ms": sent_ms, "customer": f"c{(n + i) % 17}",
                             "amount": round((n + i) % 1000 * 0.37, 2)}) for i in range(rows_per_file))
        tmp = folder / f".{n:09d}.tmp"          # hidden while written: Spark skips dot files
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, folder / f"{n:09d}.json")
        n += rows_per_file


def enrich(slow_ms: int):
    """Return the mapInPandas enrichment: an amount band and a customer tier per row."""
    def run(batches):
        for pdf in batches:
            if slow_ms:
                time.sleep(slow_ms / 1000)
            yield pdf.assign(band=pd.cut(pdf["amount"], [-1, 50, 200, 1e9], labels=["S", "M", "L"]).astype(str),
                             tier=pdf["customer"].str[1:].astype(int) % 3)
    return run


def start_query(spark: SparkSession, args: argparse.Namespace):
    """Start files -> arrival latency -> timed enrichment -> Parquet; return the running query."""
    rows = (spark.readStream.schema(SCHEMA).json(str(args.work_dir / "in"))
            .withColumn("event_time", F.timestamp_millis("sent_ms")))
    arrived = record_latency(rows, "event_time", "arrival")
    schema = f"{arrived.schema.simpleString()[7:-1]}, band string, tier long"
    enriched = arrived.mapInPandas(timed_step("enrich", enrich(args.slow_ms)), schema)
    return start_writer(enriched.writeStream.queryName(NAME).format("parquet")
                        .option("path", str(args.work_dir / "out")), args)


def summary(spark: SparkSession, args: argparse.Namespace, run: QueryRun) -> str:
    """Return the summary line: rows and files read, the steps recorded, where the output is."""
    files = len(list((args.work_dir / "in").glob("*.json")))
    return (f"{NAME}: {run.rows} rows from {files} files in {len(run.batches)} batches, enriched "
            f"(steps arrival, enrich{f', slowed {args.slow_ms} ms' if args.slow_ms else ''}) "
            f"into {args.work_dir / 'out'} (parquet)")


def main(argv: list[str] | None = None) -> int:
    """Run the writer and the query for --duration seconds, stop both cleanly, print one summary line."""
    args = parse_args(argv)
    (args.work_dir / "in").mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    writer = threading.Thread(target=write_files, args=(args.work_dir / "in", args.rows_per_file, stop),
                              name="file-writer", daemon=True)

    def start(spark: SparkSession, args: argparse.Namespace):
        query = start_query(spark, args)
        writer.start()             # once the query is there to read the files
        return query

    return run_example(NAME, args, start, summary, before_stop=stop.set)


if __name__ == "__main__":
    sys.exit(main())
