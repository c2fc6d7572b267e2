"""Latency samples of the job's steps, computed inside Spark tasks over whole batches.

Each function turns one task's events into `StepSample`s with a few numpy operations
(no Python per event). Steps (Wallaroo's per-step view, in ns):
`source` ingest -> read into a batch; `check_market_data` the stateful computation of
the batch; `sink` encoding and writing the results; `start-to-end` ingest -> result
written for rejected orders, ingest -> state updated for every other event.
"""
from __future__ import annotations

import numpy as np

from collector.samples import (STEP_CHECK, STEP_E2E, STEP_SINK, STEP_SOURCE, StepSample,
                               record_step)

from .fixish import NBBO_TYPE, ORDER_TYPE

_PIPELINES = ((NBBO_TYPE, "nbbo"), (ORDER_TYPE, "orders"))


def _keep(samples) -> list[StepSample]:
    return [s for s in samples if s is not None]


def source_samples(ev: np.ndarray, worker: str, now_ns: int) -> list[StepSample]:
    """Queueing before Spark: ingest time to the moment the batch read the events."""
    return _keep(record_step(STEP_SOURCE, name, worker, now_ns - ev["ingest_ns"][ev["kind"] == kind], now_ns)
                 for kind, name in _PIPELINES)


def state_samples(ev: np.ndarray, rejected: np.ndarray, worker: str, t0_ns: int,
                  t1_ns: int) -> list[StepSample]:
    """The stateful step's duration for every event, and start-to-end for events done here."""
    out = []
    done = np.ones(len(ev), dtype=bool)
    done[rejected] = False                   # rejected orders end at the sink
    for kind, name in _PIPELINES:
        mine = ev["kind"] == kind
        out.append(record_step(STEP_CHECK, name, worker, np.array([t1_ns - t0_ns]), t1_ns,
                               repeat=int(mine.sum())))
        out.append(record_step(STEP_E2E, name, worker, t1_ns - ev["ingest_ns"][mine & done], t1_ns))
    return _keep(out)


def sink_samples(ingest_ns: np.ndarray, worker: str, t0_ns: int, written_ns: int) -> list[StepSample]:
    """Encode-and-write time of each result, and start-to-end of the rejected orders."""
    return _keep([record_step(STEP_SINK, "orders", worker, np.array([written_ns - t0_ns]), written_ns,
                              repeat=len(ingest_ns)),
                  record_step(STEP_E2E, "orders", worker, written_ns - ingest_ns, written_ns)])
