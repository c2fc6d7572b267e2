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
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_listener import record_latency, timed_step

NAME = "files_enrich"
FILE_EVERY_S = 0.5
SCHEMA = "id long, sent_ms long, customer string, amount double"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Read the command line."""
    p = argparse.ArgumentParser(prog=NAME, description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60, help="seconds to run from the first rows (0: until Ctrl-C)")
    p.add_argument("--rows-per-file", type=int, default=100, help="rows in each file the writer drops")
    p.add_argument("--trigger-ms", type=int, default=1000, help="processing-time trigger (0: back to back)")
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "spark-examples" / NAME)
    p.add_argument("--slow-ms", type=int, default=0, help="sleep this long in the enrichment, per batch")
    p.add_argument("--master", help="Spark master (default local[2], unless spark-submit set one)")
    p.add_argument("--progress-out", type=Path, help="also write Spark's progress of every batch here (JSON)")
    args = p.parse_args(argv)
    if args.rows_per_file <= 0 or args.trigger_ms < 0 or args.duration < 0 or args.slow_ms < 0:
        p.error("--rows-per-file must be > 0; --trigger-ms, --duration and --slow-ms >= 0")
    return args


def master_of(flag: str | None) -> str | None:
    """Return the master to set: the flag's, else local[2] unless a launcher already chose one."""
    launched = "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return flag or (None if launched else "local[2]")


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
    writer = (enriched.writeStream.queryName(NAME).format("parquet").option("path", str(args.work_dir / "out"))
              .option("checkpointLocation", str(args.work_dir / "checkpoint")))
    if args.trigger_ms:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    return writer.start()


def follow(query, duration_s: float, batches: dict[int, dict]) -> None:
    """Collect each batch's progress for `duration_s` after the first rows (0: forever), or until the query ends."""
    deadline = float("inf")
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.5)
        for p in query.recentProgress:
            batches[p["batchId"]] = json.loads(p.json)
        if duration_s > 0 and deadline == float("inf") and any(p["numInputRows"] for p in batches.values()):
            deadline = time.monotonic() + duration_s


def stop_between_batches(query, wait_s: float = 10) -> None:
    """Stop the query once its current batch is done (waiting up to `wait_s`), so Spark commits it."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the writer and the query for --duration seconds, stop both cleanly, print one summary line."""
    args = parse_args(argv)
    (args.work_dir / "in").mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(NAME)
    master = master_of(args.master)
    if master:
        builder = builder.master(master)
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    batches: dict[int, dict] = {}
    stop = threading.Event()
    writer = threading.Thread(target=write_files, args=(args.work_dir / "in", args.rows_per_file, stop),
                              name="file-writer", daemon=True)
    query = None
    try:
        query = start_query(spark, args)
        writer.start()
        follow(query, args.duration, batches)
    except KeyboardInterrupt:
        print(f"{NAME}: interrupted, stopping the query after its current batch", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop.set()
        if query is not None:
            stop_between_batches(query)
            for p in query.recentProgress:
                batches[p["batchId"]] = json.loads(p.json)
        failure = query.exception() if query is not None else None
    spark.stop()
    if failure is not None:
        print(f"{NAME}: the query failed: {failure}", file=sys.stderr)
        return 1
    rows = sum(p["numInputRows"] for p in batches.values())
    files = len(list((args.work_dir / "in").glob("*.json")))
    if args.progress_out:       # Spark's own figures, for comparing runs (bench/monitor_overhead.py)
        args.progress_out.write_text(json.dumps({"progress": [batches[b] for b in sorted(batches)]}))
    print(f"{NAME}: {rows} rows from {files} files in {len(batches)} batches, enriched "
          f"(steps arrival, enrich{f', slowed {args.slow_ms} ms' if args.slow_ms else ''}) "
          f"into {args.work_dir / 'out'} (parquet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
