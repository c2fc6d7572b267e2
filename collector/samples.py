"""Per-batch latency samples: what Spark tasks record and hand to the driver.

A `StepSample` is one partition's histogram of one step for one batch, in sparse form.
Tasks record them with numpy over whole batches (`record_step`) and write them beside the
batch's results (a few KB per batch), so they are committed exactly when the batch's
results are: a failed task attempt's or a rerun batch's samples are never counted twice.
"""
from __future__ import annotations

import base64
import json
import socket
from dataclasses import dataclass

import numpy as np

from collector.histogram import COUNTS_LEN, SparseCounts, bucket_indices, record_batch

STEP_INGRESS = "ingress"
STEP_SOURCE = "source"
STEP_CHECK = "check_market_data"
STEP_SINK = "sink"
STEP_E2E = "start-to-end"
STEPS = (STEP_INGRESS, STEP_SOURCE, STEP_CHECK, STEP_SINK, STEP_E2E)
PIPELINES = ("nbbo", "orders")


@dataclass(frozen=True)
class StepSample:
    """Latencies (ns) of `counts.total` events of one step, pipeline and worker."""
    pipeline: str
    step: str
    worker: str
    ts_ns: int                  # when the step finished for these events (wall clock)
    counts: SparseCounts


def worker_name(partition: int | None = None) -> str:
    """Name the worker recording a sample: host, and Spark partition when in a task."""
    host = socket.gethostname()
    return host if partition is None else f"{host}/p{partition}"


def record_step(step: str, pipeline: str, worker: str, values_ns: np.ndarray, ts_ns: int,
                repeat: int = 1) -> StepSample | None:
    """Histogram `values_ns` (each counted `repeat` times); None if there are none."""
    values_ns = np.asarray(values_ns, dtype=np.int64)
    if values_ns.size == 0 or repeat == 0:
        return None
    counts = record_batch(values_ns)
    if repeat != 1:
        counts = SparseCounts(counts.indices, counts.counts * repeat)
    return StepSample(pipeline, step, worker, int(ts_ns), counts)


def record_groups(step: str, names: tuple[str, ...], group: np.ndarray, worker: str,
                  values_ns: np.ndarray, ts_ns: int, weights: np.ndarray | None = None) -> list[StepSample]:
    """Histogram values split by `group` (index into `names`) in one pass: one sample per
    non-empty group. Bucketing once and counting the distinct `group * COUNTS_LEN + bucket`
    keys avoids a boolean-mask gather per group (measured ~10x cheaper), and counting only
    the keys present, not a dense array of every bucket (2 x 33,792), took a batch's
    samples from ~1.3 ms to a fraction at ~1,700 events.
    `weights`: how many events each value stands for (default one each)."""
    values_ns = np.asarray(values_ns, dtype=np.int64)
    if values_ns.size == 0:
        return []
    combined = bucket_indices(values_ns)
    combined += np.asarray(group, dtype=np.int64) * COUNTS_LEN
    keys, inverse = np.unique(combined, return_inverse=True)
    counts = np.bincount(inverse.reshape(-1), weights=weights, minlength=len(keys))
    counts = counts.astype(np.int64) if weights is not None else counts
    groups = keys // COUNTS_LEN
    out = []
    for g, name in enumerate(names):
        sel = (groups == g) & (counts > 0)
        if sel.any():
            out.append(StepSample(name, step, worker, int(ts_ns),
                                  SparseCounts((keys[sel] - g * COUNTS_LEN).astype(np.int32), counts[sel])))
    return out


def subtract_groups(total: list[StepSample], part: list[StepSample]) -> list[StepSample]:
    """Take `part`'s counts out of `total` (same step; samples matched by pipeline)."""
    minus = {s.pipeline: s.counts for s in part}
    out = []
    for s in total:
        m = minus.get(s.pipeline)
        if m is None:
            out.append(s)
            continue
        dense = np.zeros(COUNTS_LEN, np.int64)
        dense[s.counts.indices] = s.counts.counts
        np.subtract.at(dense, m.indices, m.counts)
        if dense.min() < 0:
            raise ValueError("subtracting counts that were never recorded")
        nz = np.flatnonzero(dense)
        if len(nz):
            out.append(StepSample(s.pipeline, s.step, s.worker, s.ts_ns,
                                  SparseCounts(nz.astype(np.int32), dense[nz])))
    return out


def encode_samples(samples: list[StepSample]) -> bytes:
    """Encode samples compactly (one JSON line each, counts as base64)."""
    return "\n".join(json.dumps([s.pipeline, s.step, s.worker, s.ts_ns,
                                 base64.b64encode(s.counts.to_bytes()).decode()])
                     for s in samples).encode()


def decode_samples(data: bytes | str | None) -> list[StepSample]:
    """Decode what `encode_samples` wrote."""
    if not data:
        return []
    text = data.decode() if isinstance(data, (bytes, bytearray)) else data
    out = []
    for line in text.splitlines():
        p, st, w, ts, b64 = json.loads(line)
        out.append(StepSample(p, st, w, int(ts), SparseCounts.from_bytes(base64.b64decode(b64))))
    return out
