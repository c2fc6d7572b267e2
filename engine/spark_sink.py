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
RESULT_SCHEMA = ("seq long, ingest_ns long, side byte, account long, order_id long, symbol int, "
                 "qty double, price double, bid double, offer double")


@dataclass
class PartWritten(WriterCommitMessage):
    """One task's output: its part file (None if it had no rows) and record count."""
    name: str | None
    count: int
    first_seq: int


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
        return RESULT_SCHEMA

    def streamWriter(self, schema, overwrite: bool) -> "ResultStreamWriter":
        return ResultStreamWriter(self.options)


class ResultStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options):
        self.path = options["path"]
        os.makedirs(os.path.join(self.path, "parts"), exist_ok=True)
        os.makedirs(os.path.join(self.path, "_manifest"), exist_ok=True)

    def write(self, iterator) -> PartWritten:
        import numpy as np
        import pyarrow as pa

        from .results import encode_result_columns

        batches = [b for b in iterator if b.num_rows]
        if not batches:
            return PartWritten(None, 0, -1)
        table = pa.Table.from_batches(batches)
        cols = {c: table.column(c).to_numpy() for c in table.column_names}
        frames = encode_result_columns(cols)
        name = f"part-{uuid.uuid4().hex}"
        base = os.path.join(self.path, "parts", name)
        side = np.empty((len(frames), 2), dtype="<i8")
        side[:, 0], side[:, 1] = cols["seq"], cols["ingest_ns"]
        _write_durable(base + ".seq", side.tobytes())
        _write_durable(base + ".bin", frames.tobytes())
        return PartWritten(name, len(frames), int(cols["seq"].min()))

    def commit(self, messages, batchId: int) -> None:
        parts = sorted((m for m in messages if m is not None and m.name), key=lambda m: m.first_seq)
        manifest = {"batch": batchId, "parts": [m.name for m in parts],
                    "count": sum(m.count for m in parts)}
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
