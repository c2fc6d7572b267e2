"""The Market Spread streaming query: ingress log -> per-shard rule and state -> result files."""
from __future__ import annotations

import time

import numpy as np
from pyspark import TaskContext

from collector.backpressure import StepBusy
from collector.samples import STEP_CHECK, STEP_SINK, STEP_SOURCE, worker_name

from engine.config import Config
from engine.formats.log import RECORD_BYTES, LogReader
from engine.formats.shard_files import read_shard
from engine.formats.batch import ShardFigures, ShardOutput, stamp_frames
from engine.formats.stamps import batch_stamps
from engine.formats.records import decode_events, event_columns, shard_keys, shard_rows
from engine.formats.result_frames import encode_results
from engine.rule import apply_rule
from engine.spark import shard_state, worker_memory
from engine.spark.checkpoint import committed_batches
from engine.spark.source import source_format, source_options

# The function writes its own output and returns no rows (see engine/formats/batch.py).
OUTPUT_SCHEMA = "shard int"
# Set by Spark's micro-batch loop on every job it runs; tasks read it from TaskContext.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_NAME = "market-spread"
_LISTENERS: dict = {}                  # query id -> its offset listener, until stop_query


def _ranges(batches) -> dict[int, list[tuple[int, int]]]:
    """The planned `(shard key, lo, hi)` rows of a task's Arrow batches, by shard key."""
    by_key: dict[int, list[tuple[int, int]]] = {}
    for b in batches:
        for key, lo, hi in zip(*(b.column(c).to_pylist() for c in ("shard", "lo", "hi"))):
            by_key.setdefault(int(key), []).append((int(lo), int(hi)))
    return by_key


def make_check_market_data(log_dir: str, out_dir: str, state_dir: str, n_shards: int, metrics: bool = True,
                           bytes_read=None, retain: int = Config.checkpoint_batches):
    """Return the job's `mapInArrow` function (with or without latency samples).

    Per shard of a task's planned rows, and batch, it reads its own symbols' events of
    the batch's log range (from the shard files where they cover the range, else from
    the log, keeping its own), runs the rule over them from the shard's state before the
    batch (shard_state.py, in `state_dir`), writes the state after it, and writes the
    shard's results and samples itself (engine/formats/batch.py). It yields nothing: the query's
    sink is Spark's `noop`, and a batch commits with Spark's own commit log. `bytes_read`,
    a Spark accumulator, if given, adds the bytes of records each task read.
    """
    group_keys = shard_keys(n_shards)

    def check_market_data(batches):
        """Run the rule over the shards' events of a batch; write results, state and samples."""
        t_start = time.time_ns()
        worker_memory.prepare()
        planned = _ranges(batches)
        if not planned:
            return
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty(BATCH_ID_PROPERTY))
        for key, ranges in sorted(planned.items()):
            _check_shard(group_keys.index(key), sorted(set(ranges)), batch, ctx, t_start)
            t_start = time.time_ns()
        yield from ()

    def _check_shard(shard: int, ranges: list[tuple[int, int]], batch: int, ctx, t_start: int) -> None:
        recs, seq_parts, nbytes = [], [], 0
        for lo, hi in ranges:
            own = read_shard(log_dir, n_shards, shard, lo, hi) if n_shards > 1 else None
            if own is not None:
                recs.append(own.rec)
                seq_parts.append(own.seq)
                nbytes += own.nbytes
                continue
            rec = LogReader(log_dir).read(lo, hi, worker_memory.read_buffer((hi - lo) * RECORD_BYTES))
            nbytes += rec.nbytes
            if n_shards == 1:
                recs.append(rec)
                seq_parts.append(np.arange(lo, hi, dtype=np.int64))
            else:
                mine = shard_rows(rec, n_shards, shard)
                recs.append(rec[mine])
                seq_parts.append(lo + mine)
        if bytes_read is not None:
            bytes_read.add(nbytes)
        rec = recs[0] if len(recs) == 1 else np.concatenate(recs)
        ev = event_columns(rec, seq_parts[0] if len(seq_parts) == 1 else np.concatenate(seq_parts))
        t0 = time.time_ns()
        out = apply_rule(shard_state.load(state_dir, shard, batch), ev.seq, ev.kind, ev.symbol, ev.a, ev.b)
        shard_state.save(state_dir, shard, batch, out.state, retain)
        t1 = time.time_ns()
        frames = seqs = b""
        written = t1
        if len(out.rows):
            # Only the rejected orders are decoded whole (their account, id, side).
            rows = encode_results(decode_events(rec[out.rows], ev.seq[out.rows]), out.bid, out.offer)
            written = time.time_ns()
            frames, seqs = stamp_frames(rows, written)
        with ShardOutput(out_dir, batch, shard) as output:
            output.write_results(frames, seqs)
            if metrics:                  # appended to the keys' sidecar: no file of their own
                t_end = time.time_ns()
                worker = worker_name(ctx.partitionId())
                stamps = batch_stamps(ev, out.rows, worker, t0, t1, written)    # histogrammed by the shipper
                busy = StepBusy(worker, t_end, {STEP_SOURCE: t0 - t_start, STEP_CHECK: t1 - t0,
                                                STEP_SINK: t_end - t1})
                output.write_figures(ShardFigures(stamps.to_bytes(), busy.to_bytes()))

    return check_market_data


def query_writer(spark, cfg: Config, bytes_read=None):
    """The job's query on `cfg`'s log, results and checkpoint folders, ready to start.

    Stateless to Spark: each shard's planned rows go to one task (one partition for one
    shard, else a hash partitioning whose keys put shard k in partition k), and the task
    keeps the shard's state itself (shard_state.py). Spark's state store loaded, diffed
    and committed the state row in every batch, through a shuffle and a sort: batches
    took ~130 ms at 50k events/s against ~50-85 ms this way (docs/PERFORMANCE.md, "Design
    decisions": "The symbol table kept in the task instead of Spark's state store").
    """
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    events = (spark.readStream.format(source_format(spark))
              .options(**source_options(str(cfg.log_dir), cfg.shards, cfg.max_rows_per_batch, cfg.first_batch_rows))
              .load())
    events = events.coalesce(1) if cfg.shards == 1 else events.repartition(cfg.shards, "shard")
    results = events.mapInArrow(
        make_check_market_data(str(cfg.log_dir), str(cfg.out_dir), str(cfg.shard_state_dir),
                               cfg.shards, cfg.metrics, bytes_read, cfg.checkpoint_batches),
        OUTPUT_SCHEMA)
    return (results.writeStream.format("noop")
            .option("checkpointLocation", str(cfg.checkpoint_dir))
            .queryName(QUERY_NAME)
            .outputMode("append")
            .trigger(processingTime=f"{cfg.trigger_ms} milliseconds"))


def start_query(spark, cfg: Config, metrics_listener=None, *, consumed, bytes_read=None, before_start=None):
    """Start the streaming query; returns the StreamingQuery.

    The log's `consumed` offset follows each batch through `metrics_listener` (the job's
    monitor, anything with `add_progress_hook`) when it is attached (one Python listener
    instead of two), else through `consumed` attached as a listener of its own. `consumed` is a `marketspread.progress.ConsumedOffsetListener`
    for this log: the caller builds it, as its Spark bridge is spark_listener's.
    `bytes_read` (`spark.sparkContext.accumulator(0)`) counts the bytes of ingress
    records the state tasks read, on the driver (`bytes_read.value`). `before_start`, if
    given, is called once the query is planned, just before it starts (replay waits there
    for its warm Python worker).
    """
    writer = query_writer(spark, cfg, bytes_read)
    if not committed_batches(cfg.checkpoint_dir):
        shard_state.start_fresh(str(cfg.shard_state_dir))
    # the monitor follows only this query (the job's session runs no other)
    hooked = metrics_listener is not None and metrics_listener.add_progress_hook(consumed.publish)
    if before_start is not None:
        before_start()
    query = writer.start()
    if not hooked:
        # Attached after start to match this query's id; the first progress event comes
        # only after the first batch commits, and each event carries the absolute offset.
        consumed.query_id = str(query.id)
        spark.streams.addListener(consumed)
        _LISTENERS[str(query.id)] = consumed
    return query


def stop_query(spark, query) -> None:
    """Stop the query and detach its offset listener."""
    query.stop()
    listener = _LISTENERS.pop(str(query.id), None)
    if listener is not None:
        spark.streams.removeListener(listener)
