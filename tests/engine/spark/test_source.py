"""The ingress source's planned rows: one `(shard, lo, hi)` Arrow row per shard key."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from engine.ingress.log import LogWriter
from engine.spark.source import IngressRangeReader, range_batch
from engine.wire.records import shard_keys

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
    reader = IngressRangeReader({"path": str(log), "shards": "2", "maxRowsPerBatch": "3"})
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
    opts = {"path": str(log), "shards": "1", "maxRowsPerBatch": "4", "firstBatchRows": "2"}
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
