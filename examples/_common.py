"""What the example jobs share: their common flags, the session, running a query and stopping it cleanly.

Plain PySpark and the standard library only: the examples stand for a user's own job and
never import the monitoring product. Each example imports this module by name
(`from _common import ...`), as a script's own folder is on `sys.path`.
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
from typing import Callable, NamedTuple

from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery


class SizeFlag(NamedTuple):
    """The flag that sets how much an example's source produces: `--rate`, `--rows-per-file`."""
    flag: str
    default: int
    help: str
    least: int = 1


class QueryRun(NamedTuple):
    """What a run of a query left: Spark's progress of each batch (its JSON, by batch id) and its failure."""
    batches: dict[int, dict]
    failure: Exception | None

    @property
    def rows(self) -> int:
        """Return the rows the query read over all its batches."""
        return sum(p["numInputRows"] for p in self.batches.values())


def example_parser(name: str, doc: str, size: SizeFlag, slow_help: str) -> argparse.ArgumentParser:
    """Return a parser with the flags every example takes; the example adds its own."""
    p = argparse.ArgumentParser(prog=name, description=doc.splitlines()[0])
    p.add_argument("--duration", type=float, default=60, help="seconds to run from the first rows (0: until Ctrl-C)")
    p.add_argument(size.flag, type=int, default=size.default, help=size.help)
    p.add_argument("--trigger-ms", type=int, default=1000, help="processing-time trigger (0: back to back)")
    # The system temp dir, not the current folder: an example must not litter the user's
    # checkout, and its checkpoint is throw-away (pass the same --work-dir to resume it).
    p.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "spark-examples" / name)
    p.add_argument("--slow-ms", type=int, default=0, help=slow_help)
    p.add_argument("--master", help="Spark master (default local[2], unless spark-submit set one)")
    p.add_argument("--progress-out", type=Path, help="also write Spark's progress of every batch here (JSON)")
    return p


def parse_example_args(p: argparse.ArgumentParser, size: SizeFlag, argv: list[str] | None) -> argparse.Namespace:
    """Read the command line with `p` (from `example_parser`); refuse a too small size or a negative time."""
    args = p.parse_args(argv)
    value = getattr(args, size.flag.lstrip("-").replace("-", "_"))
    if value < size.least or args.trigger_ms < 0 or args.duration < 0 or args.slow_ms < 0:
        least = "> 0" if size.least == 1 else f">= {size.least}"
        p.error(f"{size.flag} must be {least}; --trigger-ms, --duration and --slow-ms >= 0")
    return args


def _master_of(flag: str | None) -> str | None:
    """Return the master to set: the flag's, else local[2] unless a launcher already chose one."""
    # spark-submit starts the JVM (with its --master or spark-defaults' spark.master) before
    # Python and passes its gateway port down: setting a master here would override the user's.
    launched = "PYSPARK_GATEWAY_PORT" in os.environ or "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return flag or (None if launched else "local[2]")


def _build_session(name: str, master: str | None, shuffle_partitions: int | None = None) -> SparkSession:
    """Build (or join) the Spark session named `name`, small enough for a laptop."""
    builder = SparkSession.builder.appName(name)
    if chosen := _master_of(master):
        builder = builder.master(chosen)
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    # No console progress bar: it would bury the summary line.
    return builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()


def start_writer(writer: DataStreamWriter, args: argparse.Namespace) -> StreamingQuery:
    """Start the query with its checkpoint in --work-dir and a --trigger-ms trigger (0: back to back)."""
    writer = writer.option("checkpointLocation", str(args.work_dir / "checkpoint"))
    if args.trigger_ms:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    return writer.start()


def parquet_rows(spark: SparkSession, path: Path) -> int:
    """Return the rows in the Parquet folder `path`, 0 while no batch has written a file there."""
    try:
        return spark.read.parquet(str(path)).count()
    except Exception:          # no file yet: nothing to read
        return 0


def sleep_in_batches(slow_ms: int):
    """Return a mapInPandas function that sleeps once per partition, then passes rows on."""
    def slow(batches):
        time.sleep(slow_ms / 1000)
        yield from batches
    return slow


def run_example(name: str, args: argparse.Namespace,
                start: Callable[[SparkSession, argparse.Namespace], StreamingQuery],
                summarise: Callable[[SparkSession, argparse.Namespace, QueryRun], str],
                shuffle_partitions: int | None = None, before_stop: Callable[[], object] = lambda: None) -> int:
    """Run an example's query for --duration seconds, stop it cleanly, print its summary line; return the exit code."""
    args.work_dir.mkdir(parents=True, exist_ok=True)
    spark = _build_session(name, args.master, shuffle_partitions)
    try:
        run = _run_query(name, lambda: start(spark, args), args.duration, before_stop)
        if run.failure is not None:
            print(f"{name}: the query failed: {run.failure}", file=sys.stderr)
            return 1
        line = summarise(spark, args, run)
    finally:
        spark.stop()
    if args.progress_out:       # Spark's own figures, for comparing runs (bench/monitor_overhead.py)
        args.progress_out.write_text(json.dumps({"progress": [run.batches[b] for b in sorted(run.batches)]}))
    print(line)
    return 0


def _run_query(name: str, start: Callable[[], StreamingQuery], duration_s: float,
               before_stop: Callable[[], object]) -> QueryRun:
    """Start a query, follow it for `duration_s` from its first rows (0: until Ctrl-C or SIGTERM), stop it cleanly."""
    # `kill` (SIGTERM) stops the query as cleanly as Ctrl-C does.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    batches: dict[int, dict] = {}
    query = None
    try:
        query = start()
        _follow(query, duration_s, batches)
    except KeyboardInterrupt:
        print(f"{name}: interrupted, stopping the query after its current batch", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        before_stop()
        if query is not None:
            _stop_between_batches(query)
            _collect(query, batches)
    return QueryRun(batches, query.exception() if query is not None else None)


def _follow(query, duration_s: float, batches: dict[int, dict]) -> None:
    """Collect each batch's progress for `duration_s` after the first rows (0: forever), or until the query ends."""
    # Counted from the first batch with rows, not from the start: start-up (the JVM, the
    # first plan) takes 5 s on an idle laptop and three times that on a busy one.
    deadline = float("inf")
    while query.isActive and time.monotonic() < deadline:
        time.sleep(0.5)
        _collect(query, batches)
        if duration_s > 0 and deadline == float("inf") and any(p["numInputRows"] for p in batches.values()):
            deadline = time.monotonic() + duration_s


def _collect(query, batches: dict[int, dict]) -> None:
    """Add the progress reports Spark keeps (the last 100) to `batches`, by batch id."""
    for p in query.recentProgress:
        batches[p["batchId"]] = json.loads(p.json)


def _stop_between_batches(query, wait_s: float = 10) -> None:
    """Stop the query once its current batch is done (waiting up to `wait_s`), so Spark commits it."""
    # stop() interrupts a running batch: its output may be written and its commit not, and
    # the next start replays it. Between two batches nothing is in flight.
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()
