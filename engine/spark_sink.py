"""Exactly-once file sink for result records (a Python data source stream writer).

Tasks write their rows as Wallaroo OrderResult frames to fresh part files and fsync
them; the driver's `commit(batchId)` then writes `_manifest/<batchId>.json` atomically.
A batch is visible only through its manifest, and a replayed batch (after a crash
between the sink's commit and Spark's) rewrites the same manifest name, so readers see
each batch exactly once. Each part file has a sidecar `.seq` (seq, ingest ns per record)
that ties results back to the ingress log for latency and audits.
"""
from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

SINK_NAME = "marketspread_results"
# One row per shard per batch: the shard's results as packed `RESULT_BLOCK_DTYPE` bytes.
RESULT_BLOCK_SCHEMA = "shard int, first_seq long, count long, frames binary, metrics binary"


@dataclass
class PartWritten(WriterCommitMessage):
    """One task's output: its part file (None if it had no results), count, latency samples."""
    name: str | None
    count: int
    first_seq: int
    metrics: bytes = b""


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class ResultSink(DataSource):
    """`df.writeStream.format("marketspread_results").option("path", OUT_DIR)`."""

    @classmethod
    def name(cls) -> str:
        return SINK_NAME

    def schema(self) -> str:
        return RESULT_BLOCK_SCHEMA

    def streamWriter(self, schema, overwrite: bool) -> "ResultStreamWriter":
        return ResultStreamWriter(self.options)


class ResultStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options):
        self.path = options["path"]
        self.metrics = options.get("metrics", "true").lower() == "true"
        os.makedirs(os.path.join(self.path, "parts"), exist_ok=True)
        os.makedirs(os.path.join(self.path, "_manifest"), exist_ok=True)

    def write(self, iterator) -> PartWritten:
        import time

        import numpy as np
        import pyarrow as pa

        from .results import RESULT_BLOCK_DTYPE

        t0 = time.time_ns()
        batches = [b for b in iterator if b.num_rows]
        if not batches:
            return PartWritten(None, 0, -1)
        table = pa.Table.from_batches(batches).sort_by("first_seq")
        carried = b"\n".join(m for m in table.column("metrics").to_pylist() if m)
        blob = b"".join(v for v in table.column("frames").to_pylist() if v)
        if not blob:
            return PartWritten(None, 0, -1, carried)
        rows = np.frombuffer(blob, dtype=RESULT_BLOCK_DTYPE)
        frames = rows["frame"].copy()
        written = time.time_ns()
        frames["timestamp"] = written
        keys = np.empty((len(rows), 2), dtype="<i8")
        keys[:, 0], keys[:, 1] = rows["seq"], rows["ingest_ns"]
        name = f"part-{uuid.uuid4().hex}"
        base = os.path.join(self.path, "parts", name)
        _write_durable(base + ".seq", keys.tobytes())
        _write_durable(base + ".bin", frames.tobytes())
        if self.metrics:
            from pyspark import TaskContext

            from collector.samples import encode_samples, worker_name

            from .step_metrics import sink_samples
            ctx = TaskContext.get()
            own = encode_samples(sink_samples(keys[:, 1], worker_name(ctx.partitionId() if ctx else None),
                                              t0, written))
            carried = b"\n".join(m for m in (carried, own) if m)
        return PartWritten(name, len(rows), int(keys[0, 0]), carried)

    def commit(self, messages, batchId: int) -> None:
        parts = sorted((m for m in messages if m is not None and m.name), key=lambda m: m.first_seq)
        manifest = {"batch": batchId, "parts": [m.name for m in parts],
                    "count": sum(m.count for m in parts),
                    "metrics": [m.metrics.decode() for m in messages if m is not None and m.metrics]}
        mdir = os.path.join(self.path, "_manifest")
        final = os.path.join(mdir, f"{batchId:012d}.json")
        tmp = final + ".tmp"
        _write_durable(tmp, json.dumps(manifest).encode())
        os.replace(tmp, final)
        _fsync_dir(mdir)

    def abort(self, messages, batchId: int) -> None:
        for m in messages:
            if m is not None and m.name:
                for ext in (".bin", ".seq"):
                    try:
                        os.remove(os.path.join(self.path, "parts", m.name + ext))
                    except FileNotFoundError:
                        pass
