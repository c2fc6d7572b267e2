"""The shipper's restart position: a job killed at any moment loses no latency interval.

A crash loses what the writer still held in memory; the restarted shipper must re-read
exactly the batches that rebuild those intervals whole, and never rewrite a delivered
interval with part of its samples.
"""
from __future__ import annotations

import os
import shutil
import time
from collections import Counter

import numpy as np
import pytest

from collector.backpressure import StepBusy
from collector.samples import encode_samples, record_step
from engine.formats.batch import ShardFigures, batch_dir, stamp_frames, commit_log_dir
from tests.batch_files import write_shard_results
from engine.output.metrics_shipper import MetricsShipper, ShipPosition
from perf.exactness import committed_intervals
from engine.formats.result_frames import RESULT_BLOCK_DTYPE
from engine.formats.stamps import BatchStamps, batch_stamps
from engine.wire.fixish import NBBO_TYPE, ORDER_TYPE
from engine.formats.records import EVENT_DTYPE

RUN = "r1"
S = 1_000_000_000


class LossyWriter:
    """Holds points in memory until `deliver()`; `crash()` loses what it still holds.

    Delivered points are kept as InfluxDB keeps them: one per series and time, the last
    write replacing the one before.
    """

    def __init__(self, store: dict):
        self.store = store
        self.held: list = []
        self.added = self.done = 0

    def add(self, points, rp=None) -> int:
        self.held.extend(points)
        self.added += len(points)
        return self.added

    def delivered(self) -> int:
        return self.done

    def deliver(self, upto: int | None = None) -> None:
        upto = self.added if upto is None else min(upto, self.added)
        for p in self.held[:upto - self.done]:
            self.store[(p.measurement, tuple(sorted(p.tags.items())), p.time_ns)] = p.fields
        del self.held[:upto - self.done]
        self.done = upto


def _stored(store: dict) -> Counter:
    out = Counter()
    for (meas, tags, ts), fields in store.items():
        t = dict(tags)
        if meas == "latency" and "interval" not in t:
            out[(ts, t["step"], t["pipeline"], t["worker"])] = fields["count"]
    return out


def _figures(shard: int, ts: int, rng, stamps: bool) -> bytes:
    """A shard's samples of a batch: as the tasks write them (stamps), or as a version
    before them did (encoded samples)."""
    values = rng.integers(1_000, 10**8, size=int(rng.integers(1, 50)))
    if stamps:
        ev = np.zeros(len(values), EVENT_DTYPE)
        ev["ingest_ns"] = ts - values
        ev["kind"] = np.where(values % 2, NBBO_TYPE, ORDER_TYPE)
        rejected = np.flatnonzero(ev["kind"] == ORDER_TYPE)[:int(rng.integers(0, 3))]
        return batch_stamps(ev, rejected, f"w/p{shard}", ts + shard, ts + shard + 3_000_000,
                            ts + shard + int(rng.integers(3_000_000, 900_000_000))).to_bytes()
    samples = [record_step("start-to-end", "orders", f"w/p{shard}", values, ts + shard),
               record_step("source", "nbbo", f"w/p{shard}", values[:5], ts + shard)]
    return encode_samples([s for s in samples if s])


def _write_batches(out, first: int, n: int, t0: int, rng, stamps: bool = False) -> None:
    """Batches 0.3 s apart, each with samples of two shards: intervals straddle batches.

    As in Spark, a batch's tasks run after the batch before it committed. Some shards
    have results, whose sidecar the samples follow; the others wrote samples only.
    """
    for b in range(first, first + n):
        ts = t0 + b * 3 * S // 10
        for shard in range(2):
            figures = _figures(shard, ts, rng, stamps)
            busy = StepBusy(f"w/p{shard}", ts, {"source": 1000}).to_bytes()
            rows = np.zeros(int(rng.integers(0, 3)), dtype=RESULT_BLOCK_DTYPE)
            frames, seqs = stamp_frames(rows, ts) if len(rows) else (b"", b"")
            write_shard_results(out, b, shard, frames, seqs, ShardFigures(figures, busy))
        d = commit_log_dir(out)
        d.mkdir(parents=True, exist_ok=True)
        (d / str(b)).write_text("v1\n{}")
        os.utime(d / str(b), ns=(ts + 2 * S // 10, ts + 2 * S // 10))


@pytest.mark.parametrize("stamps", [True, False], ids=["stamps", "samples-of-a-version-before"])
@pytest.mark.parametrize("seed", range(6))
def test_a_crash_with_undelivered_intervals_loses_none_and_double_counts_none(tmp_path, seed, stamps):
    rng = np.random.default_rng(seed)
    out = tmp_path / "state" / "results"
    t0 = time.time_ns() - 80 * S            # in the past: intervals close as soon as read
    store: dict = {}
    written = 0
    for life in range(4):                   # three crashes, then a clean stop
        more = int(rng.integers(5, 40))
        _write_batches(out, written, more, t0, rng, stamps)
        written += more
        writer = LossyWriter(store)
        shipper = MetricsShipper(out, RUN, writer, tasks=2)
        shipper.ship_once()
        if life < 3:
            writer.deliver(int(rng.integers(0, writer.added + 1)))   # part reached InfluxDB
            shipper.ship_once()                                        # saves the position
            continue                                                   # crash: the rest is lost
        shipper.stop()
        writer.deliver()
    want = committed_intervals(out, RUN)
    assert sum(want.values()) > 0
    assert _stored(store) == want


def test_position_moves_on_only_as_the_writer_delivers(tmp_path):
    out = tmp_path / "state" / "results"
    t0 = time.time_ns() - 60 * S
    _write_batches(out, 0, 10, t0, np.random.default_rng(1))
    writer = LossyWriter({})
    shipper = MetricsShipper(out, RUN, writer, tasks=2)
    shipper.ship_once()
    pos = ShipPosition.load(out / "metrics-position")
    assert pos.batch == 0 and pos.floor_ns <= t0                     # nothing delivered yet
    writer.deliver()
    shipper.ship_once()
    pos = ShipPosition.load(out / "metrics-position")
    # all delivered: only batches a later batch's samples may still share an interval with
    assert 0 < pos.batch < 10 and pos.floor_ns > t0


def test_a_bare_batch_number_from_an_older_version_still_loads(tmp_path):
    (tmp_path / "metrics-position").write_text("42")
    assert ShipPosition.load(tmp_path / "metrics-position") == ShipPosition(42, 0)
    assert ShipPosition.load(tmp_path / "missing") == ShipPosition(0, 0)


_NOT_ADDING_UP = BatchStamps("w/p0", 1, 2, 3, 2, np.array([10 * 2]), np.array([0], np.int32),
                             np.array([10])).to_bytes()       # a rejected order among NBBOs only


def _ship_around_batch_6(out, seed: int, figures: bytes | None = None, busy: bytes | None = None):
    """Ship batches 0-9, batch 6 one shard written with the `figures` or `busy` given (else
    well-formed ones); return the shipper and the counts it delivered."""
    rng = np.random.default_rng(seed)
    t0 = time.time_ns() - 80 * S
    _write_batches(out, 0, 6, t0, rng, stamps=True)
    figures = _figures(0, t0 + 6 * S, rng, True) if figures is None else figures
    busy = StepBusy("w/p0", t0, {}).to_bytes() if busy is None else busy
    write_shard_results(out, 6, 0, b"", b"", ShardFigures(figures, busy))
    (commit_log_dir(out) / "6").write_text("v1\n{}")
    _write_batches(out, 7, 3, t0, rng, stamps=True)
    store: dict = {}
    writer = LossyWriter(store)
    shipper = MetricsShipper(out, RUN, writer, tasks=2)
    shipper.stop()
    writer.deliver()
    return shipper, _stored(store)


@pytest.mark.parametrize("figures", [b"MSS1" + b"\x00" * 3, b"MSS1" + b"\xff" * 60, _NOT_ADDING_UP, b'["x"]',
                                     b"\x00not json"],
                         ids=["short-stamps", "stamps-of-wrong-length", "stamps-not-adding-up", "wrong-json-shape",
                              "not-json"])
def test_unreadable_figures_are_skipped_and_counted_and_the_rest_ships(tmp_path, figures):
    """Figures intact on disk (their CRC holds) but not figures: one warning, the other batches ship."""
    out = tmp_path / "state" / "results"
    shipper, got = _ship_around_batch_6(out, 1, figures=figures)
    assert shipper.unreadable == 1 and shipper.tail.next_batch == 10
    clean = tmp_path / "clean" / "results"                 # the same batches without the unreadable figures
    shutil.copytree(out.parent, clean.parent)
    shutil.rmtree(batch_dir(clean, 6))
    assert sum(got.values()) > 0 and got == committed_intervals(clean, RUN)


@pytest.mark.parametrize("busy", [b"\x00not json", b'{"worker": "w/p0"}', b"[]"], ids=["not-json", "missing-keys", "wrong-shape"])
def test_an_unreadable_busy_figure_is_skipped_and_counted_and_the_rest_ships(tmp_path, busy):
    """A shard's busy times that do not decode lose only themselves: the latency of every batch ships."""
    out = tmp_path / "state" / "results"
    shipper, got = _ship_around_batch_6(out, 2, busy=busy)
    assert shipper.unreadable == 1 and shipper.tail.next_batch == 10
    assert sum(got.values()) > 0 and got == committed_intervals(out, RUN)
