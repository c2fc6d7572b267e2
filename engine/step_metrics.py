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
                               record_groups, record_step, subtract_groups)

from .fixish import ORDER_TYPE

# Pipelines by group index: an event's group is 1 for an order, 0 for an NBBO. Each step
# is bucketed once over the whole batch and counted per group with one `bincount`
# (collector.samples.record_groups): no boolean-mask gather per pipeline, which measured
# ~4x the cost in a profile of 250k events.
_NAMES = ("nbbo", "orders")


def _groups(ev: np.ndarray) -> np.ndarray:
    return (ev["kind"] == ORDER_TYPE).astype(np.int64)


def source_samples(ev: np.ndarray, worker: str, now_ns: int) -> list[StepSample]:
    """Queueing before Spark: ingest time to the moment the batch read the events."""
    return record_groups(STEP_SOURCE, _NAMES, _groups(ev), worker, now_ns - np.ascontiguousarray(ev["ingest_ns"]),
                         now_ns)


def state_samples(ev: np.ndarray, rejected: np.ndarray, worker: str, t0_ns: int,
                  t1_ns: int) -> list[StepSample]:
    """The stateful step's duration for every event, and start-to-end for events done here.

    Start-to-end is recorded for every event, then the rejected orders (few; they end at
    the sink) are taken out again, instead of gathering the rest with a mask.
    """
    ingest = np.ascontiguousarray(ev["ingest_ns"])
    group = _groups(ev)
    n_orders = int(group.sum())
    out = [s for s in (record_step(STEP_CHECK, name, worker, np.array([t1_ns - t0_ns]), t1_ns, repeat=n)
                       for name, n in zip(_NAMES, (len(ev) - n_orders, n_orders))) if s is not None]
    e2e = record_groups(STEP_E2E, _NAMES, group, worker, t1_ns - ingest, t1_ns)
    if len(rejected):
        e2e = subtract_groups(e2e, record_groups(STEP_E2E, _NAMES, group[rejected], worker,
                                                 t1_ns - ingest[rejected], t1_ns))
    return out + e2e


def sink_samples(ingest_ns: np.ndarray, worker: str, t0_ns: int, written_ns: int) -> list[StepSample]:
    """Encode-and-write time of each result, and start-to-end of the rejected orders."""
    return [s for s in (record_step(STEP_SINK, "orders", worker, np.array([written_ns - t0_ns]), written_ns,
                                    repeat=len(ingest_ns)),
                        record_step(STEP_E2E, "orders", worker, written_ns - ingest_ns, written_ns))
            if s is not None]
