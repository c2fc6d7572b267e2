"""The Market Spread streaming query: ingress log -> per-shard state -> result files."""
from __future__ import annotations

import time
from typing import Iterator

import numpy as np
import pandas as pd

from .config import Config
from .progress import ConsumedOffsetListener
from .records import EVENT_DTYPE
from .results import encode_results
from .rule import ShardState, apply_rule
from .spark_sink import RESULT_BLOCK_SCHEMA, SINK_NAME, ResultSink
from .spark_source import SOURCE_NAME, IngressDataSource

STATE_SCHEMA = "symbols binary, reject binary, bid binary, offer binary"
QUERY_NAME = "market-spread"
_LISTENERS: dict[str, ConsumedOffsetListener] = {}


def make_check_market_data(metrics: bool = True):
    """Return the applyInPandasWithState function (with or without latency samples)."""

    def check_market_data(key, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        """Run the rule over one shard's blocks of a batch; pass results and samples on."""
        t0 = time.time_ns()
        parts = [p for p in pdfs if len(p)]
        if not parts:
            return
        blocks = pd.concat(parts, ignore_index=True).sort_values("first_seq")
        ev = np.frombuffer(b"".join(blocks["events"]), dtype=EVENT_DTYPE)
        shard_state = ShardState.from_bytes(*state.get) if state.exists else ShardState.empty()
        out = apply_rule(shard_state, ev["seq"], ev["kind"], ev["symbol"], ev["a"], ev["b"])
        state.update(out.state.to_bytes())
        frames = encode_results(ev[out.rows], out.bid, out.offer).tobytes() if len(out.rows) else b""
        samples = b""
        if metrics:
            from pyspark import TaskContext

            from collector.samples import encode_samples, worker_name

            from .step_metrics import state_samples
            ctx = TaskContext.get()
            own = state_samples(ev, out.rows, worker_name(ctx.partitionId() if ctx else None),
                                t0, time.time_ns())
            # Samples are JSON lines: the read tasks' pass on as they are, no decode/encode.
            samples = b"\n".join([m for m in blocks["metrics"] if m] + [encode_samples(own)])
        if frames or samples:
            yield pd.DataFrame({"shard": [int(key[0])],
                                "first_seq": [int(ev["seq"][out.rows[0]]) if len(out.rows) else -1],
                                "count": [len(out.rows)], "frames": [frames], "metrics": [samples]})

    return check_market_data


def register_sources(spark) -> None:
    """Register the project's data sources with a session."""
    spark.dataSource.register(IngressDataSource)
    spark.dataSource.register(ResultSink)


def start_query(spark, cfg: Config):
    """Start the streaming query; returns the StreamingQuery."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    register_sources(spark)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    events = (spark.readStream.format(SOURCE_NAME)
              .option("path", str(cfg.log_dir))
              .option("shards", cfg.shards)
              .option("maxRowsPerBatch", cfg.max_rows_per_batch)
              .option("partitions", cfg.read_partitions)
              .option("metrics", str(cfg.metrics).lower())
              .load())
    results = events.groupBy("shard").applyInPandasWithState(
        make_check_market_data(cfg.metrics), RESULT_BLOCK_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
    writer = (results.writeStream.format(SINK_NAME)
              .option("path", str(cfg.out_dir))
              .option("metrics", str(cfg.metrics).lower())
              .option("checkpointLocation", str(cfg.checkpoint_dir))
              .queryName(QUERY_NAME)
              .outputMode("append"))
    writer = writer.trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
    query = writer.start()
    # Attached after start to match this query's id; the first progress event comes
    # only after the first batch commits, and each event carries the absolute offset.
    listener = ConsumedOffsetListener(str(cfg.log_dir), str(query.id))
    spark.streams.addListener(listener)
    _LISTENERS[str(query.id)] = listener
    return query


def stop_query(spark, query) -> None:
    """Stop the query and detach its offset listener."""
    query.stop()
    listener = _LISTENERS.pop(str(query.id), None)
    if listener is not None:
        spark.streams.removeListener(listener)
