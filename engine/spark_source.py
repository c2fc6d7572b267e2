"""Spark streaming source over the ingress log (a Python data source).

Offsets are log sequence numbers, so a restarted query re-reads exactly the ranges its
checkpoint recorded. `read` runs inside Spark tasks: it decodes its range with numpy and
yields one row per shard holding that shard's events as a packed block (records.py).
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from .records import BLOCK_SCHEMA

SOURCE_NAME = "marketspread_ingress"
BLOCK_RECORDS = 262_144           # events decoded at once; ~13 MB per block at most


class LogRange(InputPartition):
    """Records [start, end) of the log."""

    def __init__(self, start: int, end: int):
        self.start, self.end = start, end


class IngressDataSource(DataSource):
    """`spark.readStream.format("marketspread_ingress").option("path", LOG_DIR)`.

    Options: `path` (log folder), `shards` (symbol shards), `maxRowsPerBatch`,
    `partitions` (read tasks per batch).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return BLOCK_SCHEMA

    def streamReader(self, schema) -> "IngressStreamReader":
        return IngressStreamReader(self.options)


class IngressStreamReader(DataSourceStreamReader):
    def __init__(self, options):
        self.path = options["path"]
        self.n_shards = int(options.get("shards", 2))
        self.max_rows = int(options.get("maxRowsPerBatch", 500_000))
        self.n_parts = int(options.get("partitions", 2))
        self.min_part_rows = int(options.get("minPartitionRows", 20_000))
        self.metrics = options.get("metrics", "true").lower() == "true"

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def getDefaultReadLimit(self):
        return ReadMaxRows(self.max_rows)

    def latestOffset(self, start: dict, limit) -> dict:
        from .ingress_log import read_head
        head = read_head(self.path)
        begin = int(start["seq"]) if start else 0
        if isinstance(limit, ReadAllAvailable):
            return {"seq": head}
        return {"seq": min(head, begin + int(limit.max_rows))}

    def reportLatestOffset(self):
        from .ingress_log import read_head
        return {"seq": read_head(self.path)}

    def partitions(self, start: dict, end: dict):
        lo, hi = int(start["seq"]), int(end["seq"])
        if hi <= lo:
            return []
        k = max(1, min(self.n_parts, (hi - lo) // self.min_part_rows))
        cuts = [lo + (hi - lo) * i // k for i in range(k + 1)]
        return [LogRange(a, b) for a, b in zip(cuts, cuts[1:])]

    def read(self, partition: LogRange):
        import time

        import pyarrow as pa
        from pyspark import TaskContext

        from .ingress_log import LogReader
        from .records import decode_events, split_by_shard

        from .records import shard_keys
        keys = shard_keys(self.n_shards)
        reader = LogReader(self.path)
        worker = None
        for a in range(partition.start, partition.end, BLOCK_RECORDS):
            b = min(partition.end, a + BLOCK_RECORDS)
            ev = decode_events(reader.read(a, b), a)
            metrics = b""
            if self.metrics:
                from collector.samples import encode_samples, worker_name

                from .step_metrics import source_samples
                ctx = TaskContext.get()
                worker = worker or worker_name(ctx.partitionId() if ctx else None)
                metrics = encode_samples(source_samples(ev, worker, time.time_ns()))
            blocks = split_by_shard(ev, self.n_shards)
            yield pa.RecordBatch.from_arrays(
                [pa.array([keys[k] for k, _ in blocks], pa.int32()),
                 pa.array([int(e["seq"][0]) for _, e in blocks], pa.int64()),
                 pa.array([len(e) for _, e in blocks], pa.int64()),
                 pa.array([e.tobytes() for _, e in blocks], pa.binary()),
                 pa.array([metrics if i == 0 else b"" for i in range(len(blocks))], pa.binary())],
                names=["shard", "first_seq", "count", "events", "metrics"])

    def commit(self, end: dict) -> None:
        # Nothing to release: the log keeps its segments (see progress.py for why the
        # consumed offset is published from query progress, not from here).
        pass
