"""Latency of any streaming query's own steps, recorded in its Spark tasks off the hot path.

>>> events = record_latency(events, "event_time", "arrival")           # now - event_time
>>> enriched = events.mapInPandas(timed_step("enrich", enrich), schema)  # time in enrich()

Each wrapper histograms its partition's latencies with numpy (one `record_batch` per Arrow
batch, never a Python loop over rows) and, when the partition's iterator ends, appends
them to the task's file in the spool (`collector.task_spool`). `monitor()` ships a batch's
samples once Spark reports the batch committed, keeping each task's newest attempt only,
so every committed row counts once per step (docs/METRICS.md, "Latency of your own job's
steps"). The spool is resolved on the driver when the wrapper is made; on a cluster it must
be a folder the driver and every executor see (a shared file system). Recording never fails
the user's task: a sample that cannot be written is skipped and counted.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from collector.histogram import SparseCounts, bucket_indices, record_batch
from collector.names import check_name, check_tag_value
from collector.samples import StepSample, worker_name
from collector.task_spool import TaskAttempt, Uncounted, default_spool_dir, write_task_samples

__all__ = ["declared_steps", "default_spool_dir", "record_latency", "timed_group_step", "timed_step"]

#: Units of a long epoch column `record_latency` accepts, as ns per unit.
EPOCH_UNITS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_ARROW_UNITS = EPOCH_UNITS
_MERGE_EVERY = 64                   # sparse parts kept before merging: bounds a task's memory

_declared: list[str] = []
_declared_lock = threading.Lock()


def declared_steps() -> list[str]:
    """Return the steps declared in this driver process, in call order (first declaration wins)."""
    with _declared_lock:
        return list(_declared)


def _check_step(step: object) -> str:
    """Return a valid step name, else raise ValueError (`InvalidName`) saying why."""
    check_tag_value(step, "step")
    return check_name(step, "step")


def _declare(step: str) -> str:
    """Remember a checked step's place: the order the job declared its steps in."""
    with _declared_lock:
        if step not in _declared:
            _declared.append(step)
    return step


def _spool(spool_dir: str | Path | None) -> str:
    return str(Path(spool_dir or default_spool_dir()).absolute())


def _merge(parts: list[SparseCounts]) -> SparseCounts:
    """Add sparse counts of several batches into one."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return SparseCounts.empty()
    if len(parts) == 1:
        return parts[0]
    unique, inverse = np.unique(np.concatenate([p.indices for p in parts]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([p.counts for p in parts]).astype(np.float64))
    return SparseCounts(unique.astype(np.int32), counts.round().astype(np.int64))


def _task() -> tuple[TaskAttempt, str]:
    """Return this task's spool address and worker name (`host/p<partition>`)."""
    from pyspark import TaskContext     # lazy: only in a Spark task
    tc = TaskContext.get()
    if tc is None:                      # the function called outside Spark
        return TaskAttempt(None, None, "local", -1, -1, 0), worker_name()
    batch = tc.getLocalProperty("streaming.sql.batchId")
    run = tc.getLocalProperty("spark.jobGroup.id") or tc.getLocalProperty("spark.app.id") or "run"
    task = TaskAttempt(tc.getLocalProperty("sql.streaming.queryId"),
                       int(batch) if batch is not None and batch.lstrip("-").isdigit() else None,
                       run, tc.stageId(), tc.partitionId(), tc.taskAttemptId(), tc.attemptNumber())
    return task, worker_name(tc.partitionId())


class _StepRecorder:
    """One task's histogram of one step: sparse parts merged as they come, written once."""

    def __init__(self, step: str, spool: str):
        self.step, self.spool = step, spool
        self.parts: list[SparseCounts] = []
        self.nulls = self.negative = 0

    def add(self, counts: SparseCounts) -> None:
        """Add one batch's counts."""
        if len(counts):
            self.parts.append(counts)
            if len(self.parts) >= _MERGE_EVERY:
                self.parts = [_merge(self.parts)]

    def add_constant(self, values_ns: list[int], rows: list[int]) -> None:
        """Add each `values_ns[i]` counted `rows[i]` times (one elapsed time per output batch)."""
        if not values_ns:
            return
        index = bucket_indices(np.asarray(values_ns, np.int64))
        unique, inverse = np.unique(index, return_inverse=True)
        counts = np.bincount(inverse, weights=np.asarray(rows, np.float64)).round().astype(np.int64)
        keep = counts > 0
        self.add(SparseCounts(unique[keep].astype(np.int32), counts[keep]))

    def flush(self) -> None:
        """Write what this task recorded to its spool file; never raises into the user's task."""
        counts = _merge(self.parts)
        self.parts = []
        if not counts.total and not self.nulls and not self.negative:
            return
        try:
            task, worker = _task()
            samples = [StepSample("", self.step, worker, time.time_ns(), counts)] if counts.total else []
            write_task_samples(Path(self.spool), task, samples,
                               [Uncounted(self.step, self.nulls, self.negative)])
        except Exception:   # noqa: BLE001 - a lost sample must never fail the user's job
            import logging  # lazy: only on this rare path
            logging.getLogger(__name__).exception("task samples of step %s not written", self.step)
        self.nulls = self.negative = 0


def _epoch_ns_of(field_type: Any, unit: str | None) -> int:
    """Return ns per stored unit of a timestamp or long column, else raise TypeError."""
    from pyspark.sql import types as T   # lazy: keeps `import spark_listener` cheap
    if isinstance(field_type, (T.TimestampType, T.TimestampNTZType)):
        if unit is not None:
            raise TypeError("unit= is only for long epoch columns; a timestamp column has its own")
        return 0                        # Arrow's own unit, read per batch
    if isinstance(field_type, T.LongType):
        if unit not in EPOCH_UNITS:
            raise TypeError("a long column needs unit= one of "
                            f"{sorted(EPOCH_UNITS)} (epoch seconds, ms, us or ns)")
        return EPOCH_UNITS[unit]
    raise TypeError(f"record_latency needs a timestamp column (TimestampType, TimestampNTZType "
                    f"read as UTC) or a long epoch column with unit=; got {field_type.simpleString()}")


def _batch_latencies(column: Any, per_unit: int, now_ns: int) -> tuple[np.ndarray, int, int]:
    """Return (non-negative latencies ns, nulls, negatives) of one Arrow column."""
    import pyarrow as pa              # lazy: only in a Spark task
    nulls = column.null_count
    valid = column.drop_null() if nulls else column
    if pa.types.is_timestamp(valid.type):
        per_unit = _ARROW_UNITS[valid.type.unit]
        valid = valid.cast(pa.int64())
    stamps = valid.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    latencies = now_ns - stamps * per_unit if per_unit != 1 else now_ns - stamps
    ok = latencies >= 0
    negative = int(latencies.size - np.count_nonzero(ok))
    return (latencies[ok] if negative else latencies), nulls, negative


def record_latency(df: Any, ts_col: str, step: str, *, spool_dir: str | Path | None = None,
                   unit: str | None = None) -> Any:
    """Return `df` unchanged, recording per partition how long ago each row's `ts_col` was.

    `ts_col`: a TimestampType column (TimestampNTZType is read as UTC), or a long epoch
    column with `unit=` "s", "ms", "us" or "ns". Nulls are skipped and counted; timestamps
    in the future (clock skew) are counted apart and not recorded.
    """
    step = _check_step(step)
    if ts_col not in df.schema.fieldNames():
        raise ValueError(f"record_latency: no column {ts_col!r} in {df.schema.fieldNames()}")
    per_unit = _epoch_ns_of(df.schema[ts_col].dataType, unit)
    spool = _spool(spool_dir)
    _declare(step)

    def record(batches: Iterator[Any]) -> Iterator[Any]:
        rec = _StepRecorder(step, spool)
        for batch in batches:
            try:
                lat, nulls, negative = _batch_latencies(batch.column(ts_col), per_unit, time.time_ns())
                rec.nulls += nulls
                rec.negative += negative
                if lat.size:
                    rec.add(record_batch(lat))
            except Exception:   # noqa: BLE001 - the rows pass on even if timing them fails
                rec.nulls += batch.num_rows
            yield batch
        rec.flush()             # only a partition read to its end is written

    return df.mapInArrow(record, df.schema)


def _timed(step: str, spool: str, fn: Callable[..., Iterable[Any]], args: tuple,
           inputs: Iterator[Any]) -> Iterator[Any]:
    """Run `fn(*args, inputs)`, yielding its batches; time each minus the time spent pulling input."""
    rec = _StepRecorder(step, spool)
    pulled = [0]

    def feed() -> Iterator[Any]:
        it = iter(inputs)
        while True:
            t = time.perf_counter_ns()
            try:
                item = next(it)
            except StopIteration:
                pulled[0] += time.perf_counter_ns() - t
                return
            pulled[0] += time.perf_counter_ns() - t
            yield item

    result = fn(*args, feed())
    out = iter([result]) if hasattr(result, "shape") or hasattr(result, "num_rows") else iter(result)
    elapsed, rows = [], []
    while True:
        t0, p0 = time.perf_counter_ns(), pulled[0]
        try:
            batch = next(out)
        except StopIteration:
            break
        n = batch.num_rows if hasattr(batch, "num_rows") else len(batch)
        if n:
            elapsed.append(max(time.perf_counter_ns() - t0 - (pulled[0] - p0), 0))
            rows.append(n)
        yield batch
    rec.add_constant(elapsed, rows)
    rec.flush()


def timed_step(step: str, fn: Callable[[Iterator[Any]], Iterable[Any]], *,
               spool_dir: str | Path | None = None) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Wrap a `mapInPandas`/`mapInArrow` function: each output row records the time `fn` took for its batch.

    The time is `fn`'s own: from asking it for a batch to getting it, less the time spent
    waiting for its input batches.
    """
    step = _declare(_check_step(step))
    spool = _spool(spool_dir)

    def timed(batches: Iterator[Any]) -> Iterator[Any]:
        return _timed(step, spool, fn, (), batches)

    return timed


def timed_group_step(step: str, fn: Callable[[Any, Iterator[Any], Any], Iterable[Any]], *,
                     spool_dir: str | Path | None = None) -> Callable[[Any, Iterator[Any], Any], Iterator[Any]]:
    """Wrap an `applyInPandasWithState` function `fn(key, pdfs, state)` like `timed_step`.

    Written once per call (a group), as Spark gives no end-of-partition hook there.
    """
    step = _declare(_check_step(step))
    spool = _spool(spool_dir)

    def timed(key: Any, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        return _timed(step, spool, lambda inputs: fn(key, inputs, state), (), pdfs)

    return timed
