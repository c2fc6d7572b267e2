"""Latency samples of the job's steps: stamped inside Spark tasks, histogrammed off their path.

A state task records a batch's `BatchStamps` with a few numpy operations (its events'
ingest times as runs, its rejected orders' ingest times, when each step ended) and writes
them beside the batch's results; the metrics shipper turns them into `StepSample`s
(`decode_figures`). Bucketing and encoding the samples in the task cost each batch
~0.7 ms on its critical path (docs/PERFORMANCE.md, "Design decisions": "The task records
stamps; the shipper makes the histograms"). Steps
(Wallaroo's per-step view, in ns):
`source` ingest -> read into a batch; `check_market_data` the stateful computation of
the batch; `sink` encoding and writing the results; `start-to-end` ingest -> result
written for rejected orders, ingest -> state updated for every other event.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from collector.histogram import COUNTS_LEN, SparseCounts, bucket_indices
from collector.samples import StepSample, decode_samples
from collector.vocabulary import (PIPELINE_NBBO as NBBO, PIPELINE_ORDERS as ORDERS, STEP_CHECK, STEP_E2E, STEP_SINK,
                                  STEP_SOURCE)

from engine.wire.fixish import ORDER_TYPE


# What one state task records per batch: (step, pipeline, which time stamps it: 0 the
# read, 1 the state updated, 2 the results written), in the order `stamps_samples` returns them.
BATCH_SLOTS = ((STEP_SOURCE, NBBO, 0), (STEP_SOURCE, ORDERS, 0),
               (STEP_CHECK, NBBO, 1), (STEP_CHECK, ORDERS, 1),
               (STEP_E2E, NBBO, 1), (STEP_E2E, ORDERS, 1),
               (STEP_SINK, ORDERS, 2), (STEP_E2E, ORDERS, 2))
STAMPS_MAGIC = b"MSS1"
_STAMPS_HEAD = struct.Struct("<4sHqqqqII")   # magic, worker length, read, updated, written ns, events, runs, rejected
#: From this many values on, bucketing a poll's samples takes one dense weighted count over
#: every slot's buckets (~2 ms) instead of a sort: a poll of 20 large batches holds ~10^6.
_DENSE_MIN_VALUES = 60_000


@dataclass(frozen=True, eq=False)
class BatchStamps:
    """What a state task records of one batch for its latency samples.

    `run_keys` are the events' ingest times collapsed into runs of equal (ingest ns, kind)
    (`batch_stamps`), each as `ingest_ns * 2 + is_order`; `run_starts` each run's first
    event; `rejected_ns` the rejected orders' ingest times; `read_ns`, `updated_ns`,
    `written_ns` when the task read the batch, updated the state and wrote its results.
    """
    worker: str
    read_ns: int
    updated_ns: int
    written_ns: int
    events: int
    run_keys: np.ndarray       # int64
    run_starts: np.ndarray     # int32
    rejected_ns: np.ndarray    # int64

    @property
    def newest_ns(self) -> int | None:
        """The newest time stamp of the batch's samples (None: it has none)."""
        if not self.events:
            return None
        return self.written_ns if len(self.rejected_ns) else self.updated_ns

    def to_bytes(self) -> bytes:
        w = self.worker.encode()
        return b"".join((_STAMPS_HEAD.pack(STAMPS_MAGIC, len(w), self.read_ns, self.updated_ns, self.written_ns,
                                           self.events, len(self.run_keys), len(self.rejected_ns)), w,
                         self.run_keys.astype("<i8", copy=False).tobytes(),
                         self.run_starts.astype("<i4", copy=False).tobytes(),
                         self.rejected_ns.astype("<i8", copy=False).tobytes()))

    @classmethod
    def from_bytes(cls, data: bytes) -> "BatchStamps":
        if len(data) < _STAMPS_HEAD.size:
            raise ValueError(f"batch stamps of {len(data)} bytes, shorter than their header")
        magic, nw, read, updated, written, events, runs, rej = _STAMPS_HEAD.unpack_from(data)
        if magic != STAMPS_MAGIC:
            raise ValueError("not a batch's stamps")
        at = _STAMPS_HEAD.size + nw
        if len(data) != at + runs * 12 + rej * 8:
            raise ValueError(f"batch stamps of {len(data)} bytes, expected {at + runs * 12 + rej * 8}")
        keys = np.frombuffer(data, "<i8", runs, at)
        starts = np.frombuffer(data, "<i4", runs, at + runs * 8)
        return cls(bytes(data[_STAMPS_HEAD.size:at]).decode(), read, updated, written, events, keys, starts,
                   np.frombuffer(data, "<i8", rej, at + runs * 12))


def batch_stamps(ev, rejected: np.ndarray, worker: str, t0_ns: int, t1_ns: int, written_ns: int) -> BatchStamps:
    """A state task's stamps of its batch (`ev`: its `EventColumns`, or any events with
    `ingest_ns` and `kind` fields; `rejected` indexes `ev`), in a few numpy calls.

    The ingress stamps every message of a received chunk with one time, and a shard's
    events come in log order, so a batch of 250,000 events holds a few thousand runs of
    equal (ingest ns, kind): one value per run, weighted by its length, gives the same
    counts (exact, whatever the order: equal neighbours merge, others not). A run's key
    packs its kind into the lowest bit (ingest times below 2**62 ns: until 2116).
    """
    ingest = np.ascontiguousarray(ev["ingest_ns"])      # a copy only for a structured array
    key = ingest * 2
    key += ev["kind"] == ORDER_TYPE
    n = len(key)
    change = np.empty(n, bool)
    change[:1] = True
    np.not_equal(key[1:], key[:-1], out=change[1:])
    starts = np.flatnonzero(change).astype(np.int32)
    return BatchStamps(worker, t0_ns, t1_ns, written_ns, n, key[starts], starts,
                       ingest[rejected])


def stamps_samples(st: BatchStamps) -> list[StepSample]:
    """Every sample of a state task's batch, from its stamps: `source` and `start-to-end`
    per run, `check_market_data` and `sink` once, weighted by their events, and the
    rejected orders' `start-to-end` at the sink."""
    return _merged_samples([st])


def interval_samples(stamps: list[BatchStamps], interval_ns: int) -> list[StepSample]:
    """The samples of many batches' stamps, merged per worker and interval.

    The shipper needs each interval's histogram per step, pipeline and worker, not each
    batch's: the batches of one worker whose three step ends fall in the same intervals
    go through one bucketing together, so a poll's ~20 batches pay the numpy calls' fixed
    costs (~0.1 ms a batch) about once. A merged sample carries the newest of its
    batches' stamps, which lies in the same interval as each of theirs.
    """
    groups: dict[tuple, list[BatchStamps]] = {}
    for st in stamps:
        if st.events:
            key = (st.worker, *(t - t % interval_ns for t in (st.read_ns, st.updated_ns, st.written_ns)))
            groups.setdefault(key, []).append(st)
    return [s for group in groups.values() for s in _merged_samples(group)]


def _merged_samples(group: list[BatchStamps]) -> list[StepSample]:
    """The samples of one worker's batches together (the `BATCH_SLOTS`), stamped with
    the newest of their read, updated and written times.

    One bucketing, one `unique` and one weighted `bincount` over values keyed by their
    slot; the rejected orders' start-to-end at the state step is taken out with weight
    -1 (they end at the sink).
    """
    b = len(group)
    t0, t1, wr = (np.array([getattr(st, f) for st in group], np.int64) for f in ("read_ns", "updated_ns", "written_ns"))
    events = np.array([st.events for st in group], np.int64)
    n_runs = np.array([len(st.run_keys) for st in group])
    n_rej = np.array([len(st.rejected_ns) for st in group])
    run_keys = np.concatenate([st.run_keys for st in group])
    rej_ingest = np.concatenate([st.rejected_ns for st in group])
    run_batch, rej_batch = np.repeat(np.arange(b), n_runs), np.repeat(np.arange(b), n_rej)
    # the batches' runs end to end: a run's length is the distance to the next run's start
    starts = np.concatenate([st.run_starts for st in group]).astype(np.int64)
    starts += np.repeat(np.cumsum(events) - events, n_runs)
    weight = np.diff(np.append(starts, events.sum())).astype(np.float64)
    run_ingest, run_group = run_keys >> 1, run_keys & 1
    orders = np.bincount(run_batch, weights=weight * run_group, minlength=b)
    k = len(rej_ingest)
    values = np.concatenate([t0[run_batch] - run_ingest, t1 - t0, t1 - t0, t1[run_batch] - run_ingest,
                             t1[rej_batch] - rej_ingest, wr - t1, wr[rej_batch] - rej_ingest])
    slots = np.concatenate([run_group, np.full(b, 2), np.full(b, 3), 4 + run_group, np.full(k, 5), np.full(b, 6),
                            np.full(k, 7)])
    weights = np.concatenate([weight, events - orders, orders, weight, np.full(k, -1.0), n_rej, np.ones(k)])
    index = bucket_indices(values) + slots * COUNTS_LEN
    if len(index) < _DENSE_MIN_VALUES:
        keys, inverse = np.unique(index, return_inverse=True)
        counts = np.rint(np.bincount(inverse.reshape(-1), weights=weights, minlength=len(keys))).astype(np.int64)
    else:                        # a sort of this many costs more than one pass over every slot's buckets
        dense = np.bincount(index, weights=weights, minlength=len(BATCH_SLOTS) * COUNTS_LEN)
        keys = np.flatnonzero(dense)
        counts = np.rint(dense[keys]).astype(np.int64)
    if len(counts) and counts.min() < 0:
        raise ValueError("rejected orders that were never recorded at the state step")
    keys, counts = keys[counts > 0], counts[counts > 0]
    bounds = np.searchsorted(keys, np.arange(len(BATCH_SLOTS) + 1) * COUNTS_LEN)
    stamps = (int(t0.max()), int(t1.max()), int(wr.max()))
    return [StepSample(pipeline, step, group[0].worker, stamps[which],
                       SparseCounts((keys[lo:hi] - slot * COUNTS_LEN).astype(np.int32), counts[lo:hi]))
            for slot, ((step, pipeline, which), lo, hi) in enumerate(zip(BATCH_SLOTS, bounds[:-1], bounds[1:]))
            if hi > lo]


def is_stamps(data: bytes) -> bool:
    """Whether a shard's figures are `BatchStamps` (else samples of a version before them)."""
    return data[:len(STAMPS_MAGIC)] == STAMPS_MAGIC


def decode_figures(data: bytes) -> list[StepSample]:
    """The samples of a shard's figures: its `BatchStamps`, or, written by a version before
    them, its samples encoded (collector.samples.encode_samples)."""
    if is_stamps(data):
        return stamps_samples(BatchStamps.from_bytes(data))
    return decode_samples(data)
