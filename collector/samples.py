"""Per-batch latency samples: what Spark tasks record and hand to the driver.

A `StepSample` is one partition's histogram of one step for one batch, in sparse form.
Recorders make them with numpy over whole batches (`record_step` per step). The Market
Spread job's tasks write their batch's raw stamps beside its results instead, and its
driver makes every step's samples from them (`engine.formats.stamps`), so they are
committed exactly when the batch's results are: a failed task attempt's or a rerun
batch's samples are never counted twice.
"""
from __future__ import annotations

import base64
import json
import socket
from dataclasses import dataclass

import numpy as np

from collector.histogram import SparseCounts, record_batch
from collector.vocabulary import (MARKET_SPREAD_STEPS, PIPELINES, STEP_CHECK, STEP_E2E, STEP_INGRESS,  # noqa: F401
                                  STEP_SINK, STEP_SOURCE)

STEPS = MARKET_SPREAD_STEPS


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
