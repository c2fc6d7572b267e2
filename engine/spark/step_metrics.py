"""Latency samples of the job's steps: stamped inside Spark tasks, histogrammed off their path.

A state task records a batch's `BatchStamps` with a few numpy operations (its events'
ingest times as runs, its rejected orders' ingest times, when each step ended) and writes
them beside the batch's results; the metrics shipper turns them into `StepSample`s
(`decode_figures`). Bucketing and encoding the samples in the task cost each batch
~0.6 ms on its critical path (bench/README.md, "Issue 17, session 19"). Steps
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
from collector.samples import STEP_CHECK, STEP_E2E, STEP_SINK, STEP_SOURCE, StepSample, decode_samples

from engine.wire.fixish import ORDER_TYPE


# What one state task records per batch: (step, pipeline, which time stamps it: 0 the
# read, 1 the state updated, 2 the results written), in the order `stamps_samples` returns them.
BATCH_SLOTS = ((STEP_SOURCE, "nbbo", 0), (STEP_SOURCE, "orders", 0),
               (STEP_CHECK, "nbbo", 1), (STEP_CHECK, "orders", 1),
               (STEP_E2E, "nbbo", 1), (STEP_E2E, "orders", 1),
               (STEP_SINK, "orders", 2), (STEP_E2E, "orders", 2))
STAMPS_MAGIC = b"MSS1"
_STAMPS_HEAD = struct.Struct("<4sHqqqqII")   # magic, worker length, read, updated, written ns, events, runs, rejected


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

    def to_bytes(self) -> bytes:
        w = self.worker.encode()
        return b"".join((_STAMPS_HEAD.pack(STAMPS_MAGIC, len(w), self.read_ns, self.updated_ns, self.written_ns,
                                           self.events, len(self.run_keys), len(self.rejected_ns)), w,
                         self.run_keys.astype("<i8", copy=False).tobytes(),
                         self.run_starts.astype("<i4", copy=False).tobytes(),
                         self.rejected_ns.astype("<i8", copy=False).tobytes()))

    @classmethod
    def from_bytes(cls, data: bytes) -> "BatchStamps":
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
    key = np.ascontiguousarray(ev["ingest_ns"]) * 2
    key += ev["kind"] == ORDER_TYPE
    n = len(key)
    change = np.empty(n, bool)
    change[:1] = True
    np.not_equal(key[1:], key[:-1], out=change[1:])
    starts = np.flatnonzero(change).astype(np.int32)
    return BatchStamps(worker, t0_ns, t1_ns, written_ns, n, key[starts], starts,
                       np.ascontiguousarray(ev["ingest_ns"])[rejected])


def stamps_samples(st: BatchStamps) -> list[StepSample]:
    """Every sample of a state task's batch, from its stamps: `source` and `start-to-end`
    per run, `check_market_data` and `sink` once, weighted by their events, and the
    rejected orders' `start-to-end` at the sink.

    One bucketing, one `unique` and one weighted `bincount` over values keyed by their
    slot in `BATCH_SLOTS`; the rejected orders' start-to-end at the state step is taken
    out with weight -1 (they end at the sink).
    """
    t0_ns, t1_ns, written_ns = st.read_ns, st.updated_ns, st.written_ns
    run_ingest, run_group = st.run_keys >> 1, st.run_keys & 1
    weight = np.diff(np.append(st.run_starts, st.events)).astype(np.float64)
    n_orders = int(weight[run_group == 1].sum())
    rej_ingest, k = st.rejected_ns, len(st.rejected_ns)
    values = np.concatenate([t0_ns - run_ingest, [t1_ns - t0_ns] * 2, t1_ns - run_ingest, t1_ns - rej_ingest,
                             [written_ns - t1_ns], written_ns - rej_ingest]).astype(np.int64)
    slots = np.concatenate([run_group, [2, 3], 4 + run_group, np.full(k, 5), [6], np.full(k, 7)]).astype(np.int64)
    weights = np.concatenate([weight, [st.events - n_orders, n_orders], weight, np.full(k, -1.0), [k], np.ones(k)])
    keys, inverse = np.unique(bucket_indices(values) + slots * COUNTS_LEN, return_inverse=True)
    counts = np.rint(np.bincount(inverse.reshape(-1), weights=weights, minlength=len(keys))).astype(np.int64)
    if len(counts) and counts.min() < 0:
        raise ValueError("rejected orders that were never recorded at the state step")
    keys, counts = keys[counts > 0], counts[counts > 0]
    bounds = np.searchsorted(keys, np.arange(len(BATCH_SLOTS) + 1) * COUNTS_LEN)
    stamps = (t0_ns, t1_ns, written_ns)
    return [StepSample(pipeline, step, st.worker, int(stamps[which]),
                       SparseCounts((keys[lo:hi] - slot * COUNTS_LEN).astype(np.int32), counts[lo:hi]))
            for slot, ((step, pipeline, which), lo, hi) in enumerate(zip(BATCH_SLOTS, bounds[:-1], bounds[1:]))
            if hi > lo]


def batch_samples(ev, rejected: np.ndarray, worker: str, t0_ns: int, t1_ns: int,
                  written_ns: int) -> list[StepSample]:
    """Every sample of a state task's batch, in one call (`batch_stamps`, then `stamps_samples`)."""
    return stamps_samples(batch_stamps(ev, rejected, worker, t0_ns, t1_ns, written_ns))


def decode_figures(data: bytes) -> list[StepSample]:
    """The samples of a shard's figures: its `BatchStamps`, or, written by a version before
    them, its samples encoded (collector.samples.encode_samples)."""
    if data[:len(STAMPS_MAGIC)] == STAMPS_MAGIC:
        return stamps_samples(BatchStamps.from_bytes(data))
    return decode_samples(data)
