"""Latency samples of the job's steps, computed inside Spark tasks over whole batches.

One function turns one task's events into `StepSample`s with a few numpy operations (no
Python per event). Steps (Wallaroo's per-step view, in ns):
`source` ingest -> read into a batch; `check_market_data` the stateful computation of
the batch; `sink` encoding and writing the results; `start-to-end` ingest -> result
written for rejected orders, ingest -> state updated for every other event.
"""
from __future__ import annotations

import numpy as np

from collector.histogram import COUNTS_LEN, SparseCounts, bucket_indices
from collector.samples import STEP_CHECK, STEP_E2E, STEP_SINK, STEP_SOURCE, StepSample

from engine.wire.fixish import ORDER_TYPE


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


# What one state task records per batch: (step, pipeline, which time stamps it: 0 the
# read, 1 the state updated, 2 the results written), in the order `batch_samples` returns them.
BATCH_SLOTS = ((STEP_SOURCE, "nbbo", 0), (STEP_SOURCE, "orders", 0),
               (STEP_CHECK, "nbbo", 1), (STEP_CHECK, "orders", 1),
               (STEP_E2E, "nbbo", 1), (STEP_E2E, "orders", 1),
               (STEP_SINK, "orders", 2), (STEP_E2E, "orders", 2))


def batch_samples(ev, rejected: np.ndarray, worker: str, t0_ns: int, t1_ns: int,
                  written_ns: int) -> list[StepSample]:
    """Every sample of a state task's batch (`ev`: its `EventColumns`, or any events with
    `ingest_ns` and `kind` fields): `source` and `start-to-end` per run of
    `ingest_runs`, `check_market_data` and `sink` once, weighted by their events, and the
    rejected orders' `start-to-end` at the sink; `rejected` indexes `ev`.

    One bucketing, one `unique` and one weighted `bincount` over values keyed by their
    slot in `BATCH_SLOTS`; the rejected orders' start-to-end at the state step is taken
    out with weight -1 (they end at the sink). With their encoding, seven such pipelines
    (one per step and kind) took ~0.30 ms of CPU for a 50k events/s batch's ~2,000 events,
    this one ~0.13 ms: at that size the numpy calls' fixed costs are the price, not the
    events (bench/README.md).
    """
    ingest = np.ascontiguousarray(ev["ingest_ns"])
    group = _groups(ev)
    run_ingest, run_group, weight = ingest_runs(ingest, group)
    n_orders = int(group.sum())
    rej_ingest, rej_group, k = ingest[rejected], group[rejected], len(rejected)
    values = np.concatenate([t0_ns - run_ingest, [t1_ns - t0_ns] * 2, t1_ns - run_ingest, t1_ns - rej_ingest,
                             [written_ns - t1_ns], written_ns - rej_ingest]).astype(np.int64)
    slots = np.concatenate([run_group, [2, 3], 4 + run_group, 4 + rej_group, [6], np.full(k, 7)]).astype(np.int64)
    weights = np.concatenate([weight, [len(ev) - n_orders, n_orders], weight, np.full(k, -1.0), [k], np.ones(k)])
    keys, inverse = np.unique(bucket_indices(values) + slots * COUNTS_LEN, return_inverse=True)
    counts = np.rint(np.bincount(inverse.reshape(-1), weights=weights, minlength=len(keys))).astype(np.int64)
    if len(counts) and counts.min() < 0:
        raise ValueError("rejected orders that were never recorded at the state step")
    keys, counts = keys[counts > 0], counts[counts > 0]
    bounds = np.searchsorted(keys, np.arange(len(BATCH_SLOTS) + 1) * COUNTS_LEN)
    stamps = (t0_ns, t1_ns, written_ns)
    return [StepSample(pipeline, step, worker, int(stamps[which]),
                       SparseCounts((keys[lo:hi] - slot * COUNTS_LEN).astype(np.int32), counts[lo:hi]))
            for slot, ((step, pipeline, which), lo, hi) in enumerate(zip(BATCH_SLOTS, bounds[:-1], bounds[1:]))
            if hi > lo]
