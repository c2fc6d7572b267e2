"""The Market Spread streaming query: chunk files -> per-shard state -> result parts + manifest.

    chunks/<a>-<b>.s<k>.ev  --Spark binaryFile source (JVM)-->  one row per chunk
      --groupBy(shard)-->  applyInPandasWithState: decode, rule, write parts/<shard>-<a>-<b>
      --foreachBatch(batchId)-->  _manifest/<batchId>.json on the driver

The stateful task writes its shard's results itself, under a name fixed by its input
range, and hands the driver one small row (part name, counts, latency samples). Spark
replays an uncommitted batch with the same files and state, so the part is rewritten
with the same records and the manifest for that batchId with the same parts: each
result is visible exactly once. No Python worker reads or writes on Spark's behalf.
"""
from __future__ import annotations

import logging
import time
from typing import Iterator

import numpy as np
import pandas as pd

from .chunks import (CHUNK_GLOB, Chunk, ChunkChain, check_layout, chunk_dir, chunk_events, chunk_origin,
                     write_position)
from .config import Config
from .ingress_log import read_head
from .progress import ConsumedOffsetListener
from .records import CHUNK_DTYPE, decode_events, shard_keys
from .results import encode_results, last_manifest, write_manifest, write_part
from .rule import ShardState, apply_rule

log = logging.getLogger(__name__)

STATE_SCHEMA = ("symbols binary, reject binary, bid binary, offer binary, "
                "upto long, waiting_ranges binary, waiting_data binary")
OUTPUT_SCHEMA = ("k int, part string, count long, first_seq long, upto long, waiting int, "
                 "events long, head long, metrics binary")
# Observed per batch (`df.observe`), read by spark_listener from query progress: events
# applied, where the slowest shard has reached, and the log head when the batch ran.
OBSERVATION = "ingress"
FILE_SCHEMA = "path string, modificationTime timestamp, length long, content binary"
QUERY_NAME = "market-spread"
_LISTENERS: dict[str, ConsumedOffsetListener] = {}


def make_check_market_data(out_dir: str, log_dir: str, origin: int, metrics: bool = True):
    """Return the applyInPandasWithState function of one shard (with or without samples)."""

    def check_market_data(key, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        """Apply the shard's chunks along their chain; write its results; report to the driver."""
        t0 = time.time_ns()
        rows = pd.concat([p for p in pdfs if len(p)], ignore_index=True)
        if not len(rows):
            return
        k = int(rows["k"].iloc[0])
        if state.exists:
            symbols, reject, bid, offer, upto, w_ranges, w_data = state.get
            shard_state = ShardState.from_bytes(symbols, reject, bid, offer)
            chain = ChunkChain(int(upto), ChunkChain.waiting_from(w_ranges, w_data))
        else:
            shard_state, chain = ShardState.empty(), ChunkChain(origin, [])
        start = chain.upto
        ready = chain.take([Chunk(int(a), int(b), c) for a, b, c in
                            zip(rows["a"], rows["b"], rows["content"])])
        recs = chunk_events(ready)
        ev = decode_events(np.ascontiguousarray(recs["rec"]), recs["seq"])
        out = apply_rule(shard_state, ev["seq"], ev["kind"], ev["symbol"], ev["a"], ev["b"])
        t1 = time.time_ns()
        part, first_seq = None, -1
        written = t1
        if len(out.rows):
            part = f"s{k}-{start:020d}-{chain.upto:020d}"
            first_seq = int(ev["seq"][out.rows[0]])
            result_rows = encode_results(ev[out.rows], out.bid, out.offer)
            write_part(out_dir, part, result_rows, t1)
            written = time.time_ns()
        state.update(out.state.to_bytes() + (chain.upto,) + chain.waiting_bytes())
        samples = b""
        if metrics:
            from pyspark import TaskContext

            from collector.samples import encode_samples, worker_name

            from .step_metrics import task_samples
            ctx = TaskContext.get()
            samples = encode_samples(task_samples(ev, out.rows, worker_name(ctx.partitionId() if ctx else None),
                                                  t0, t1, written))
        yield pd.DataFrame({"k": [k], "part": [part], "count": [len(out.rows)], "first_seq": [first_seq],
                            "upto": [chain.upto], "waiting": [len(chain.waiting)], "events": [len(ev)],
                            "head": [read_head(log_dir)], "metrics": [samples]})

    return check_market_data


class BatchCommitter:
    """The driver's `foreachBatch`: collect the shards' small rows, write the batch's manifest.

    Also tracks how far every shard has applied the log (`upto`); the least of them is the
    batch's `consumed`, published by `ConsumedOffsetListener` once Spark has committed it.
    """

    def __init__(self, out_dir: str, log_dir: str, shards: int, origin: int):
        self.out_dir = out_dir
        self.log_dir = log_dir
        prev = last_manifest(out_dir)
        have = {int(k): int(v) for k, v in (prev or {}).get("upto", {}).items()}
        self.upto = {k: have.get(k, origin) for k in range(shards)}
        self._waiting_since: float | None = None

    def __call__(self, df, batch_id: int) -> None:
        rows = [r.asDict() for r in df.collect()]
        for r in rows:
            self.upto[r["k"]] = max(self.upto[r["k"]], r["upto"])
        parts = sorted((r for r in rows if r["part"]), key=lambda r: r["first_seq"])
        manifest = {"batch": batch_id, "parts": [r["part"] for r in parts],
                    "count": sum(r["count"] for r in rows), "events": sum(r["events"] for r in rows),
                    "upto": {str(k): v for k, v in self.upto.items()},
                    "consumed": min(self.upto.values()),
                    "metrics": [r["metrics"].decode() for r in rows if r["metrics"]]}
        write_manifest(self.out_dir, batch_id, manifest)
        write_position(self.log_dir, manifest["consumed"])      # the ingress cuts the next chunk now
        self._watch_waiting(sum(r["waiting"] for r in rows))

    def _watch_waiting(self, waiting: int) -> None:
        if not waiting:
            self._waiting_since = None
            return
        now = time.monotonic()
        self._waiting_since = self._waiting_since or now
        if now - self._waiting_since > 30:
            log.warning("%d chunks have waited %.0f s for a missing chunk range", waiting,
                        now - self._waiting_since)
            self._waiting_since = now


def start_query(spark, cfg: Config):
    """Start the streaming query; returns the StreamingQuery."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    check_layout(cfg.log_dir, cfg.shards)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    (cfg.out_dir / "parts").mkdir(exist_ok=True)
    (cfg.out_dir / "_manifest").mkdir(exist_ok=True)
    origin = chunk_origin(cfg.log_dir)
    keys = shard_keys(cfg.shards)
    files = (spark.readStream.format("binaryFile").schema(FILE_SCHEMA)
             .option("pathGlobFilter", CHUNK_GLOB)
             .option("maxBytesPerTrigger", cfg.max_rows_per_batch * CHUNK_DTYPE.itemsize)
             .load(str(chunk_dir(cfg.log_dir))))
    name = r"(\d{20})-(\d{20})\.s(\d+)\.ev$"
    k = F.regexp_extract("path", name, 3).cast("int")
    chunks = files.select(F.element_at(F.array(*[F.lit(x) for x in keys]), k + 1).alias("shard"),
                          k.alias("k"),
                          F.regexp_extract("path", name, 1).cast("long").alias("a"),
                          F.regexp_extract("path", name, 2).cast("long").alias("b"),
                          "content")
    results = chunks.groupBy("shard").applyInPandasWithState(
        make_check_market_data(str(cfg.out_dir), str(cfg.log_dir), origin, cfg.metrics),
        OUTPUT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
    results = results.observe(OBSERVATION, F.sum("events").alias("events"),
                              F.min("upto").alias("end_seq"), F.max("head").alias("latest_seq"))
    query = (results.writeStream.foreachBatch(BatchCommitter(str(cfg.out_dir), str(cfg.log_dir), cfg.shards, origin))
             .option("checkpointLocation", str(cfg.checkpoint_dir))
             .queryName(QUERY_NAME)
             .trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
             .start())
    # Attached after start to match this query's id; progress comes after each commit.
    listener = ConsumedOffsetListener(str(cfg.log_dir), str(cfg.out_dir), str(query.id))
    spark.streams.addListener(listener)
    _LISTENERS[str(query.id)] = listener
    return query


def stop_query(spark, query) -> None:
    """Stop the query and detach its offset listener."""
    query.stop()
    listener = _LISTENERS.pop(str(query.id), None)
    if listener is not None:
        spark.streams.removeListener(listener)
