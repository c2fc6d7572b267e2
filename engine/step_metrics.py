"""Latency samples of the job's steps, computed inside Spark tasks over whole batches.

Each function turns one task's events into `StepSample`s with a few numpy operations
(no Python per event). Steps (Wallaroo's per-step view, in ns):
`source` ingest -> picked up by a batch; `check_market_data` the stateful computation of
the batch; `sink` encoding and writing the results; `start-to-end` ingest -> result
written for rejected orders, ingest -> state updated for every other event.
"""
from __future__ import annotations

import numpy as np

from collector.samples import (STEP_CHECK, STEP_E2E, STEP_SINK, STEP_SOURCE, StepSample,
                               record_groups, record_step, subtract_groups)

from .fixish import ORDER_TYPE

# Pipelines by group index: an event's group is 1 for an order, 0 for an NBBO.
_NAMES = ("nbbo", "orders")


def task_samples(ev: np.ndarray, rejected: np.ndarray, worker: str, t0_ns: int, t1_ns: int,
                 written_ns: int) -> list[StepSample]:
    """All steps of one state task's batch: `ev` picked up at `t0_ns`, state updated at
    `t1_ns`, the `rejected` rows' results written at `written_ns`.

    Two bucketing passes over the batch, no per-pipeline gathers: start-to-end is
    recorded for every event at `t1_ns`, then the rejected orders are taken out again and
    recorded at `written_ns` (they are few).
    """
    ingest = np.ascontiguousarray(ev["ingest_ns"])
    group = (ev["kind"] == ORDER_TYPE).astype(np.int64)
    n_orders = int(group.sum())
    out = record_groups(STEP_SOURCE, _NAMES, group, worker, t0_ns - ingest, t0_ns)
    out += [s for s in (record_step(STEP_CHECK, name, worker, np.array([t1_ns - t0_ns]), t1_ns, repeat=n)
                        for name, n in zip(_NAMES, (len(ev) - n_orders, n_orders))) if s is not None]
    e2e = record_groups(STEP_E2E, _NAMES, group, worker, t1_ns - ingest, t1_ns)
    if len(rejected):
        done_late = t1_ns - ingest[rejected]
        e2e = subtract_groups(e2e, record_groups(STEP_E2E, _NAMES, group[rejected], worker, done_late, t1_ns))
        out += [s for s in (record_step(STEP_SINK, "orders", worker, np.array([written_ns - t1_ns]),
                                        written_ns, repeat=len(rejected)),
                            record_step(STEP_E2E, "orders", worker, written_ns - ingest[rejected], written_ns))
                if s is not None]
    return out + e2e
