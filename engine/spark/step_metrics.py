"""Latency samples of the job's steps, computed inside Spark tasks over whole batches.

Each function turns one task's events into `StepSample`s with a few numpy operations
(no Python per event). Steps (Wallaroo's per-step view, in ns):
`source` ingest -> read into a batch; `check_market_data` the stateful computation of
the batch; `sink` encoding and writing the results; `start-to-end` ingest -> result
written for rejected orders, ingest -> state updated for every other event.
"""
from __future__ import annotations

import numpy as np

from collector.samples import STEP_CHECK, STEP_E2E, STEP_SINK, STEP_SOURCE, StepSample, record_groups, record_step, subtract_groups

from engine.wire.fixish import ORDER_TYPE

# Pipelines by group index: an event's group is 1 for an order, 0 for an NBBO. Each step
# is bucketed once over the whole batch and counted per group with one `bincount`
# (collector.samples.record_groups): no boolean-mask gather per pipeline, which measured
# ~4x the cost in a profile of 250k events.
_NAMES = ("nbbo", "orders")


def _groups(ev: np.ndarray) -> np.ndarray:
    return (ev["kind"] == ORDER_TYPE).astype(np.int64)


def ingest_runs(ingest_ns: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Collapse runs of equal (ingest ns, group) into (ingest ns, group, run length).

    The ingress stamps every message of a received chunk with one time, and a shard's
    events come in log order, so a batch of 250,000 events holds a few thousand runs:
    bucketing one value per run, weighted by its length, gives the same counts for a
    fraction of the work (exact, whatever the order: equal neighbours merge, others not).
    """
    n = len(ingest_ns)
    if n == 0:
        return ingest_ns, group, np.empty(0, np.float64)
    change = np.empty(n, bool)
    change[0] = True
    np.not_equal(ingest_ns[1:], ingest_ns[:-1], out=change[1:])
    change[1:] |= group[1:] != group[:-1]
    starts = np.flatnonzero(change)
    lengths = np.diff(np.append(starts, n)).astype(np.float64)
    return ingest_ns[starts], group[starts], lengths


def event_runs(ev: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`ingest_runs` of a batch's events: computed once, used by the source and state steps."""
    return ingest_runs(np.ascontiguousarray(ev["ingest_ns"]), _groups(ev))


def source_samples(ev: np.ndarray, worker: str, now_ns: int, runs=None) -> list[StepSample]:
    """Queueing before Spark: ingest time to the moment the batch read the events."""
    ingest, group, weight = runs if runs is not None else event_runs(ev)
    return record_groups(STEP_SOURCE, _NAMES, group, worker, now_ns - ingest, now_ns, weight)


def state_samples(ev: np.ndarray, rejected: np.ndarray, worker: str, t0_ns: int,
                  t1_ns: int, runs=None) -> list[StepSample]:
    """The stateful step's duration for every event, and start-to-end for events done here.

    Start-to-end is recorded for every event, then the rejected orders (few; they end at
    the sink) are taken out again, instead of gathering the rest with a mask.
    """
    ingest = np.ascontiguousarray(ev["ingest_ns"])
    group = _groups(ev)
    n_orders = int(group.sum())
    out = [s for s in (record_step(STEP_CHECK, name, worker, np.array([t1_ns - t0_ns]), t1_ns, repeat=n)
                       for name, n in zip(_NAMES, (len(ev) - n_orders, n_orders))) if s is not None]
    run_ingest, run_group, weight = runs if runs is not None else ingest_runs(ingest, group)
    e2e = record_groups(STEP_E2E, _NAMES, run_group, worker, t1_ns - run_ingest, t1_ns, weight)
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
