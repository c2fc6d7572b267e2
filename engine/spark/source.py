"""Spark streaming source over the ingress log: the JVM's when the project's jar is there, else Python's.

Offsets are log sequence numbers, so a restarted query re-reads exactly the ranges its
checkpoint recorded. The source does not carry the events themselves: each batch is one
row per shard, `(shard, lo, hi)`, and the shard's stateful task reads its events of the
log range `[lo, hi)` itself (job.py). The rows are planned on the driver by a *simple*
stream reader, which Spark hands to the tasks as a cached block: no Python worker runs
to read a batch, which measured ~60 ms of fixed cost per micro-batch and per read task.

With the project's jar (jvm_jar.py) the same plan is made in the driver JVM
(java/marketspread/spark/IngressSource.java): then no Python process is started to find,
create and run the source, three fresh interpreters on a query's start (docs/PERFORMANCE.md,
"Design decisions": "The ingress source planned in the driver JVM"). This module's Python source is the fallback without the jar;
both write the same offsets, so either resumes the other's checkpoint.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

from engine.spark.jvm_jar import has_class
from engine.formats.log import read_head
from engine.formats.records import shard_keys

SOURCE_NAME = "marketspread_ingress"
JVM_SOURCE = "marketspread.spark.IngressSource"
RANGE_SCHEMA = "shard int, lo long, hi long"
_RANGE_ARROW = pa.schema([("shard", pa.int32()), ("lo", pa.int64()), ("hi", pa.int64())])


def _column(values, dtype, arrow_type) -> pa.Array:
    """An Arrow array over a NumPy array's buffer (not `pa.array`, which imports pandas)."""
    a = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(arrow_type, len(a), [None, pa.py_buffer(a)])


def range_batch(keys: list[int], lo: int, hi: int) -> pa.RecordBatch:
    """One `(shard, lo, hi)` row per shard key, as an Arrow batch.

    Returned to Spark as Arrow, not as tuples: Spark's runner turns tuples into Arrow
    with `pa.array`, and pyarrow imports pandas the first time (~0.18 s inside the
    query's first batch, measured with JFR; docs/PERFORMANCE.md, "Design decisions": "The
    source's rows handed over as Arrow").
    """
    n = len(keys)
    return pa.RecordBatch.from_arrays([_column(keys, np.int32, pa.int32()), _column([lo] * n, np.int64, pa.int64()),
                                       _column([hi] * n, np.int64, pa.int64())], schema=_RANGE_ARROW)


class IngressDataSource(DataSource):
    """`spark.readStream.format("marketspread_ingress").option("path", LOG_DIR)`.

    Options (`source_options`): `path` (log folder), `shardKeys` (comma-separated), `maxRowsPerBatch`,
    `firstBatchRows` (the cap of the first batch that reads records; 0 or unset: `maxRowsPerBatch`).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return RANGE_SCHEMA

    def simpleStreamReader(self, schema) -> "IngressRangeReader":
        return IngressRangeReader(self.options)


class IngressRangeReader(SimpleDataSourceStreamReader):
    """Plans each batch as the log range from the last offset to the durable head.

    At most `maxRowsPerBatch` records per batch (admission control is the reader's own
    choice of end offset here), and at most `firstBatchRows` in the first batch this
    reader plans: a query's first batch runs in a JVM and a worker not yet warm, and a
    smaller one gives the first results sooner. A restarted query builds a new reader,
    whose first batch is small again.
    """

    def __init__(self, options):
        self.path = options["path"]
        self.keys = [int(k) for k in options["shardKeys"].split(",")]
        self.max_rows = int(options.get("maxRowsPerBatch", 500_000))
        first = int(options.get("firstBatchRows", 0))
        self.next_rows = min(self.max_rows, first) if first > 0 else self.max_rows

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def _rows(self, lo: int, hi: int) -> list[pa.RecordBatch]:
        return [range_batch(self.keys, lo, hi)] if hi > lo else []

    def read(self, start: dict):
        lo = int(start["seq"])
        hi = min(read_head(self.path), lo + self.next_rows)
        if hi <= lo:
            return iter(()), start
        self.next_rows = self.max_rows
        return iter(self._rows(lo, hi)), {"seq": hi}

    def readBetweenOffsets(self, start: dict, end: dict):
        return iter(self._rows(int(start["seq"]), int(end["seq"])))

    def commit(self, end: dict) -> None:
        # Nothing to release: the log keeps its segments (see progress.py for why the
        # consumed offset is published from query progress, not from here).
        pass


def source_format(spark) -> str:
    """The `readStream.format` of the ingress source in `spark`: the JVM's if it has the
    class, else the Python source, registered here."""
    if has_class(spark, JVM_SOURCE):
        return JVM_SOURCE
    spark.dataSource.register(IngressDataSource)
    return SOURCE_NAME


def source_options(log_dir: str, shards: int, max_rows: int, first_rows: int) -> dict[str, str]:
    """The options of either source; the shard keys are computed here, once (shard_keys)."""
    return {"path": log_dir, "shardKeys": ",".join(map(str, shard_keys(shards))),
            "maxRowsPerBatch": str(max_rows), "firstBatchRows": str(first_rows)}
