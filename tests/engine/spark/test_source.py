"""The ingress source's planned rows: one `(shard, lo, hi)` row per shard key, from either source.

The JVM's source (java/marketspread/spark/IngressSource.java, in the project's jar) and the
Python fallback run real streaming queries on a real session and must plan the same
batches, write the same offsets and resume each other's checkpoints.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from engine.formats.log import LogWriter
from engine.spark import jvm_jar
from engine.spark.source import (JVM_SOURCE, SOURCE_NAME, IngressDataSource, IngressRangeReader, range_batch,
                                 source_format, source_options)
from engine.formats.records import shard_keys

# RANGE_SCHEMA as Spark parses it (parsing the DDL string needs a running session).
RANGE_STRUCT = StructType([StructField("shard", IntegerType()), StructField("lo", LongType()),
                           StructField("hi", LongType())])


def test_range_batch_has_the_schema_spark_checks_and_one_row_per_key():
    b = range_batch([3, 7], 10, 25)
    # Spark's runner rejects a batch whose schema differs from the source's (SPARK-55583 check).
    assert b.schema.equals(to_arrow_schema(RANGE_STRUCT, timezone="UTC"))
    assert b.to_pydict() == {"shard": [3, 7], "lo": [10, 10], "hi": [25, 25]}


def test_reader_plans_the_log_range_up_to_the_head_in_capped_steps(tmp_path):
    log = tmp_path / "log"
    w = LogWriter(log, fsync=False)
    w.append(np.zeros((5, 8), np.uint8), 5)     # five records (their contents do not matter to planning)
    w.commit()
    w.close()
    reader = IngressRangeReader(source_options(str(log), 2, 3, 0))
    rows, end = reader.read({"seq": 0})
    assert end == {"seq": 3}
    [b] = list(rows)
    assert b.to_pydict() == {"shard": shard_keys(2), "lo": [0, 0], "hi": [3, 3]}
    rows, end = reader.read(end)
    assert end == {"seq": 5} and [r.to_pydict()["hi"] for r in rows] == [[5, 5]]
    rows, end = reader.read(end)
    assert end == {"seq": 5} and list(rows) == []
    assert list(reader.readBetweenOffsets({"seq": 1}, {"seq": 1})) == []


def test_the_first_batch_a_reader_plans_is_capped_smaller(tmp_path):
    """The first batch after each start is at most firstBatchRows; later ones maxRowsPerBatch."""
    log = tmp_path / "log"
    w = LogWriter(log, fsync=False)
    w.append(np.zeros((10, 8), np.uint8), 10)
    w.commit()
    w.close()
    opts = source_options(str(log), 1, 4, 2)
    reader = IngressRangeReader(opts)
    assert reader.read({"seq": 0})[1] == {"seq": 0 + 2}
    assert reader.read({"seq": 2})[1] == {"seq": 6}
    assert reader.read({"seq": 6})[1] == {"seq": 10}
    # A restarted query builds a new reader: its first batch is small again.
    assert IngressRangeReader(opts).read({"seq": 6})[1] == {"seq": 8}
    # A batch with nothing to read does not use up the small first batch.
    empty = tmp_path / "empty"
    LogWriter(empty, fsync=False).close()
    idle = IngressRangeReader({**opts, "path": str(empty)})
    assert idle.read({"seq": 0})[1] == {"seq": 0}
    assert idle.next_rows == 2
    # 0, or a cap above maxRowsPerBatch, leaves every batch at maxRowsPerBatch.
    for first in ("0", "9"):
        assert IngressRangeReader({**opts, "firstBatchRows": first}).read({"seq": 0})[1] == {"seq": 4}


def test_spark_source_runner_sends_the_batch_without_importing_pandas():
    """Tuples would go through `pa.array`, which imports pandas (~0.18 s in the first batch)."""
    code = """
import io, sys
import pyspark.sql.streaming.python_streaming_source_runner as runner
from pyspark.sql.types import IntegerType, LongType, StructField, StructType
from engine.spark.source import range_batch
struct = StructType([StructField("shard", IntegerType()), StructField("lo", LongType()), StructField("hi", LongType())])
out = io.BytesIO()
runner.send_batch_func(iter([range_batch([0], 0, 10)]), out, struct, 10000, None)
assert len(out.getvalue()) > 100, len(out.getvalue())
print("pandas" in sys.modules)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def _jar_or_fail(spark):
    if not jvm_jar.has_class(spark, JVM_SOURCE):
        msg = f"the session has no project jar ({jvm_jar.jar_path()}; scripts/setup builds it)"
        if os.environ.get("CI"):
            pytest.fail(msg)               # in CI a missing jar is a set-up bug
        pytest.skip(msg)


def _append(log, n: int) -> None:
    w = LogWriter(log, fsync=False)
    w.append(np.zeros((n, 8), np.uint8), n)
    w.commit()
    w.close()


def _run(spark, fmt: str, log, checkpoint, out, shards: int = 2) -> list[tuple[int, int, int]]:
    """Run a query of the source, rows as JSON files into `out`, until it has read the whole
    log; return its batches' (start, end, rows)."""
    q = (spark.readStream.format(fmt).options(**source_options(str(log), shards, 4, 2)).load()
         .writeStream.format("json").option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(processingTime="10 milliseconds").start())
    try:
        q.processAllAvailable()
        progress = q.recentProgress
    finally:
        q.stop()
    batches = []
    for p in progress:
        [src] = p["sources"]
        if p["numInputRows"]:
            batches.append((_seq(src["startOffset"]), _seq(src["endOffset"]), p["numInputRows"]))
    return batches


def _rows(out) -> list[tuple[int, int, int]]:
    rows = [json.loads(line) for f in sorted(out.glob("part-*.json")) for line in f.read_text().splitlines()]
    return sorted((r["shard"], r["lo"], r["hi"]) for r in rows)


def _seq(offset) -> int:
    """A progress report's offset: JSON text, a parsed dict, or null before the first batch."""
    off = json.loads(offset) if isinstance(offset, str) else offset
    return 0 if off is None else int(off["seq"])


def test_the_jvm_source_plans_and_resumes_as_the_python_source(spark, tmp_path):
    """Same batches (small first one, capped later ones), same rows, and each resumes the other's checkpoint."""
    _jar_or_fail(spark)
    assert source_format(spark) == JVM_SOURCE
    spark.dataSource.register(IngressDataSource)
    keys = shard_keys(2)
    runs = {}
    for fmt, first, then in ((JVM_SOURCE, "jvm", "python"), (SOURCE_NAME, "python", "jvm")):
        log, ckpt = tmp_path / first / "log", tmp_path / first / "ckpt"
        _append(log, 10)
        out = tmp_path / first / "out"
        got = _run(spark, fmt, log, ckpt, out)
        rows = _rows(out)
        # The other source resumes this checkpoint: it starts at offset 10, with its own small first batch.
        _append(log, 5)
        other = JVM_SOURCE if fmt == SOURCE_NAME else SOURCE_NAME
        resumed = _run(spark, other, log, ckpt, out)
        runs[first] = (got, rows, resumed, _rows(out))
    want_batches = [(0, 2, 2), (2, 6, 2), (6, 10, 2)]      # two rows (one per shard key) per batch
    want_rows = sorted((k, lo, hi) for lo, hi, _ in want_batches for k in keys)
    for first, (got, rows, resumed, all_rows) in runs.items():
        assert got == want_batches, first
        assert rows == want_rows, first
        assert resumed == [(10, 12, 2), (12, 15, 2)], first
        assert all_rows == sorted(want_rows + [(k, lo, hi) for lo, hi in ((10, 12), (12, 15)) for k in keys]), first
    # Both wrote the same offset JSON in their checkpoints.
    offsets = {first: (tmp_path / first / "ckpt" / "offsets" / "0").read_text().splitlines()[-1] for first in runs}
    assert offsets["jvm"] == offsets["python"] == '{"seq": 2}'


def test_the_jvm_source_reads_no_head_as_an_empty_log_and_refuses_a_bad_offset(spark, tmp_path):
    _jar_or_fail(spark)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(spark, JVM_SOURCE, empty, tmp_path / "ckpt", tmp_path / "out") == []
    log, ckpt = tmp_path / "log", tmp_path / "ckpt2"
    _append(log, 3)
    assert _run(spark, JVM_SOURCE, log, ckpt, tmp_path / "out2") == [(0, 2, 2), (2, 3, 2)]
    entry = ckpt / "offsets" / "1"
    lines = entry.read_text().splitlines()
    entry.write_text("\n".join(lines[:-1] + ['{"seq": "three"}']) + "\n")
    with pytest.raises(Exception, match='not an ingress log offset: {"seq": "three"}'):
        _run(spark, JVM_SOURCE, log, ckpt, tmp_path / "out2")
    with pytest.raises(Exception, match="shardKeys"):
        (spark.readStream.format(JVM_SOURCE).option("path", str(empty)).load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c2")).start().processAllAvailable())
