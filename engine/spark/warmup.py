"""Warm a Python worker while the streaming query starts, for its first batch to reuse.

A query's first micro-batch started a Python worker (fork, then pyarrow, numpy and the
job's modules imported) and ran the JVM's code paths for the first time. A one-row
`mapInArrow` job (the query's own kind of Python task) run beside the query's start-up
leaves an idle worker with all of that imported (`spark.python.worker.reuse`), and the
JVM's Arrow runner classes loaded.
"""
from __future__ import annotations

import logging
import threading

import engine.spark.job  # noqa: F401  (imported here so a worker unpickling `_touch` imports it)

log = logging.getLogger(__name__)


def _touch(batches):
    """Read the input and return nothing: the worker's imports are the point."""
    for _ in batches:
        pass
    yield from ()


def warm_workers(spark) -> threading.Thread:
    """Run the warm-up job in a daemon thread; return it (joining is optional)."""
    def run() -> None:
        try:
            spark.range(1).selectExpr("CAST(id AS INT) AS shard").mapInArrow(_touch, "shard int").collect()
        except Exception as e:            # a warm-up is an optimisation: never the replay's failure
            log.info("warm-up job failed (the first batch starts its own worker): %s", e)

    thread = threading.Thread(target=run, name="spark-warmup", daemon=True)
    thread.start()
    return thread
