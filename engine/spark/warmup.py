"""Warm Spark's Python processes while the streaming query starts, for its first batch.

A query's first micro-batch started two Python processes of its own: the task's worker
(fork, then pyarrow, numpy and the job's modules imported) and the daemon that plans a
Python data source's read (Spark starts it on first use, ~0.35 s inside the first
batch, measured with JFR; docs/PERFORMANCE.md, "Design decisions": "A warm Python worker
before the first batch"). Two things run beside the query's start-up:

- a `mapInArrow` job (the query's own kind of Python task) of one row and partition
  per shard, which leaves one idle worker per shard (`spark.python.worker.reuse`) with
  all of that imported and frozen out of garbage collection, its read buffer mapped
  (worker_memory.warm) and the JVM's Arrow runner classes loaded. One per shard: with
  more idle workers than tasks, Spark hands them out in turn and a shard's batches
  alternate between them;
- when the ingress source is Python's (no project jar, source.py), the plan, not the
  run, of a read of a one-row Python data source, which starts the read-planning daemon
  without starting a task (and so a second worker). The JVM's source needs no planner.
"""
from __future__ import annotations

import logging
import threading
from typing import NamedTuple

from pyspark.sql.datasource import DataSource, DataSourceReader

import engine.spark.job  # noqa: F401  (imported here so a worker unpickling `_touch` imports it)
from engine.spark import worker_memory
from engine.spark.jvm_jar import has_class
from engine.spark.source import JVM_SOURCE

log = logging.getLogger(__name__)


def _touch(batches):
    """Prepare the worker and map its read buffer for the batch size in the input; return nothing."""
    for b in batches:
        for records in b.column("records").to_pylist():
            worker_memory.warm(records)
    yield from ()


class _WarmReader(DataSourceReader):
    def read(self, partition):
        yield (0,)


class WarmSource(DataSource):
    """A one-row batch data source, planned only: that starts Spark's read-planning daemon."""

    @classmethod
    def name(cls) -> str:
        return "marketspread_warmup"

    def schema(self) -> str:
        return "shard int"

    def reader(self, schema) -> DataSourceReader:
        return _WarmReader()


def _warm_worker(spark, records: int, workers: int) -> None:
    try:
        (spark.range(0, workers, 1, workers).selectExpr(f"CAST({int(records)} AS BIGINT) AS records")
         .mapInArrow(_touch, "records bigint").collect())
    except Exception as e:            # a warm-up is an optimisation: never the replay's failure
        log.warning("warm-up job failed (the first batch starts its own worker): %s", e)


def _warm_planner(spark) -> None:
    try:
        spark.dataSource.register(WarmSource)
        spark.read.format(WarmSource.name()).load()._jdf.queryExecution().toRdd()
    except Exception as e:
        log.warning("warm-up read plan failed (the first batch starts the planner): %s", e)


class WarmUps(NamedTuple):
    """The warm-up threads."""
    worker: threading.Thread            # the `mapInArrow` job: a first batch wants it finished
    planner: threading.Thread | None    # the planned read; None with the JVM's source

    def started(self) -> list[threading.Thread]:
        """The threads that run (to join them all)."""
        return [t for t in self if t is not None]


def warm_workers(spark, records: int = 0, workers: int = 1) -> WarmUps:
    """Start the warm-ups in daemon threads; return them (joining is optional).

    `records`: the batch size each worker's memory is warmed for (the query's largest);
    `workers`: how many (the query's tasks per batch, its shards).
    """
    planner = None
    if not has_class(spark, JVM_SOURCE):
        planner = threading.Thread(target=_warm_planner, args=(spark,), name="spark-warm-planner", daemon=True)
    threads = WarmUps(threading.Thread(target=_warm_worker, args=(spark, records, workers),
                                       name="spark-warm-worker", daemon=True), planner)
    for t in threads.started():
        t.start()
    return threads
