"""Step samples: the one-pass recording from a task's stamps equals a plain per-pipeline, per-mask recording."""
from __future__ import annotations

import numpy as np
import pytest

from collector.samples import STEP_CHECK, STEP_E2E, STEP_SINK, STEP_SOURCE, encode_samples, record_step
from engine.wire.fixish import NBBO_TYPE, ORDER_TYPE
from engine.formats.records import EVENT_DTYPE
from engine.formats import stamps as stamps_module
from engine.formats.stamps import (STAMPS_MAGIC, BatchStamps, batch_stamps, decode_figures, interval_samples,
                                   stamps_samples)


def batch_samples(ev, rejected, worker, t0_ns, t1_ns, written_ns):
    """Every sample of a state task's batch, in one call (`batch_stamps`, then `stamps_samples`)."""
    return stamps_samples(batch_stamps(ev, rejected, worker, t0_ns, t1_ns, written_ns))


def _plain(ev, rejected, t0, t1, written):
    """The obvious way: a mask per pipeline, a histogram per mask."""
    out = {}
    done = np.ones(len(ev), bool)
    done[rejected] = False
    for kind, name in ((NBBO_TYPE, "nbbo"), (ORDER_TYPE, "orders")):
        mine = ev["kind"] == kind
        out[(STEP_SOURCE, name)] = record_step(STEP_SOURCE, name, "w", t0 - ev["ingest_ns"][mine], t0)
        out[(STEP_CHECK, name)] = record_step(STEP_CHECK, name, "w", np.array([t1 - t0]), t1, repeat=int(mine.sum()))
        late = np.zeros(len(ev), np.int64)
        late[done] = t1 - ev["ingest_ns"][done]
        late[rejected] = written - ev["ingest_ns"][rejected]
        out[(STEP_E2E, name)] = record_step(STEP_E2E, name, "w", late[mine], t1)
    out[(STEP_SINK, "orders")] = record_step(STEP_SINK, "orders", "w", np.array([written - t1]), written,
                                             repeat=len(rejected))
    return {k: v for k, v in out.items() if v is not None}


def _merged(samples):
    by = {}
    for s in samples:
        key = (s.step, s.pipeline)
        dense = by.setdefault(key, {})
        for i, c in zip(s.counts.indices.tolist(), s.counts.counts.tolist()):
            dense[i] = dense.get(i, 0) + c
    return by


def test_task_samples_equal_plain_recording():
    rng = np.random.default_rng(3)
    n = 20_000
    ev = np.zeros(n, EVENT_DTYPE)
    t0 = 10**18
    ev["ingest_ns"] = t0 - rng.integers(1_000, 10**9, n)
    ev["kind"] = np.where(rng.random(n) < 0.5, NBBO_TYPE, ORDER_TYPE)
    rejected = np.flatnonzero((ev["kind"] == ORDER_TYPE) & (rng.random(n) < 0.1))
    t1, written = t0 + 3_000_000, t0 + 5_000_000
    got = _merged(batch_samples(ev, rejected, "w", t0, t1, written))
    want = _merged(_plain(ev, rejected, t0, t1, written).values())
    assert got == want
    assert sum(sum(d.values()) for (step, _), d in got.items() if step == STEP_E2E) == n


def test_a_batch_without_results_or_orders():
    ev = np.zeros(5, EVENT_DTYPE)
    ev["kind"] = NBBO_TYPE
    ev["ingest_ns"] = 100
    got = _merged(batch_samples(ev, np.empty(0, np.int64), "w", 1_000, 2_000, 2_000))
    assert set(got) == {(STEP_SOURCE, "nbbo"), (STEP_CHECK, "nbbo"), (STEP_E2E, "nbbo")}


def test_each_sample_is_stamped_when_its_step_ended():
    ev = np.zeros(6, EVENT_DTYPE)
    ev["kind"] = [NBBO_TYPE, ORDER_TYPE, ORDER_TYPE, NBBO_TYPE, ORDER_TYPE, ORDER_TYPE]
    ev["ingest_ns"] = [10, 10, 20, 20, 20, 30]
    got = batch_samples(ev, np.array([2, 5]), "w", 1_000, 2_000, 3_000)
    stamps = [(s.step, s.pipeline, s.ts_ns, s.counts.total) for s in got]
    assert stamps == [(STEP_SOURCE, "nbbo", 1_000, 2), (STEP_SOURCE, "orders", 1_000, 4),
                      (STEP_CHECK, "nbbo", 2_000, 2), (STEP_CHECK, "orders", 2_000, 4),
                      (STEP_E2E, "nbbo", 2_000, 2), (STEP_E2E, "orders", 2_000, 2),
                      (STEP_SINK, "orders", 3_000, 2), (STEP_E2E, "orders", 3_000, 2)]
    assert all(s.worker == "w" for s in got)


def test_an_empty_batch_records_nothing():
    assert batch_samples(np.zeros(0, EVENT_DTYPE), np.empty(0, np.int64), "w", 1, 2, 3) == []


def _random_batch(seed: int, n: int):
    rng = np.random.default_rng(seed)
    ev = np.zeros(n, EVENT_DTYPE)
    chunk = np.sort(rng.integers(1, 100, n))          # log order: a received chunk's messages share
    ev["ingest_ns"] = 10**18 - 10**9 + chunk * 1_000_000   # one ingest time and one stream
    ev["kind"] = np.where(chunk % 2, NBBO_TYPE, ORDER_TYPE)
    return ev, np.flatnonzero((ev["kind"] == ORDER_TYPE) & (rng.random(n) < 0.1))


def _figures(samples):
    return [(s.pipeline, s.step, s.worker, s.ts_ns, s.counts.indices.tolist(), s.counts.counts.tolist())
            for s in samples]


def test_the_tasks_stamps_travel_as_bytes_and_give_the_same_samples():
    ev, rejected = _random_batch(5, 3_000)
    stamps = batch_stamps(ev, rejected, "host/p3", 10**18, 10**18 + 4_000_000, 10**18 + 6_000_000)
    assert len(stamps.run_keys) < len(ev) // 10          # runs, not events, cross the disk
    data = stamps.to_bytes()
    assert data.startswith(STAMPS_MAGIC)
    want = batch_samples(ev, rejected, "host/p3", 10**18, 10**18 + 4_000_000, 10**18 + 6_000_000)
    assert _figures(decode_figures(data)) == _figures(want)
    assert sum(s.counts.total for s in want if s.step == STEP_SOURCE) == len(ev)


def test_figures_written_before_the_stamps_still_decode():
    """A job upgraded mid-run re-reads batches its previous version wrote (samples as JSON lines)."""
    ev, rejected = _random_batch(6, 500)
    old = batch_samples(ev, rejected, "w", 10**18, 10**18 + 1_000, 10**18 + 2_000)
    assert _figures(decode_figures(encode_samples(old))) == _figures(old)


@pytest.mark.parametrize("cut", [1, 12, 40])
def test_torn_stamps_are_refused(cut):
    ev, rejected = _random_batch(7, 200)
    data = batch_stamps(ev, rejected, "w", 1, 2, 3).to_bytes()
    with pytest.raises(ValueError):
        BatchStamps.from_bytes(data[:-cut])


def test_batches_merged_per_worker_and_interval_equal_their_samples_added_up():
    """The shipper buckets a poll's batches together: the same counts per interval, step,
    pipeline and worker as each batch's own samples, and no sample outside its batches' intervals."""
    interval = 1_000_000_000
    stamps = []
    for i in range(30):                       # 0.1 s apart: intervals hold ~10 batches, some straddle
        ev, rejected = _random_batch(100 + i, 200 + 37 * i)
        t0 = 10**18 + i * 100_000_000
        stamps.append(batch_stamps(ev, rejected if i % 4 else rejected[:0], f"h/p{i % 2}", t0, t0 + 4_000_000,
                                   t0 + 95_000_000))
    stamps.append(batch_stamps(*_random_batch(7, 0), "h/p0", 10**18, 10**18 + 1, 10**18 + 2))   # an empty batch

    def by_interval(samples):
        out = {}
        for s in samples:
            key = (s.step, s.pipeline, s.worker, s.ts_ns - s.ts_ns % interval)
            dense = out.setdefault(key, {})
            for i, c in zip(s.counts.indices.tolist(), s.counts.counts.tolist()):
                dense[i] = dense.get(i, 0) + c
        return out

    merged = interval_samples(stamps, interval)
    assert by_interval(merged) == by_interval(s for st in stamps for s in stamps_samples(st))
    assert len(merged) < sum(len(stamps_samples(st)) for st in stamps) // 4
    assert [st.newest_ns for st in stamps[:2]] == [stamps[0].updated_ns, stamps[1].written_ns]
    assert stamps[-1].newest_ns is None and stamps_samples(stamps[-1]) == []


def test_a_poll_large_enough_for_the_dense_count_gives_the_sorts_samples(monkeypatch):
    """A poll of large batches is bucketed by one dense count over every slot (no sort): the same samples."""
    rng = np.random.default_rng(11)
    stamps = []
    for i in range(3):
        n = 60_000
        ev = np.zeros(n, EVENT_DTYPE)
        chunk = np.sort(rng.integers(1, 40_000, n))
        ev["ingest_ns"] = 10**18 - 10**9 + chunk * 20_000
        ev["kind"] = np.where(chunk % 2, NBBO_TYPE, ORDER_TYPE)
        rejected = np.flatnonzero((ev["kind"] == ORDER_TYPE) & (rng.random(n) < 0.1))
        t0 = 10**18 + i * 1_000_000
        stamps.append(batch_stamps(ev, rejected, "h/p0", t0, t0 + 4_000_000, t0 + 6_000_000))
    assert sum(2 * len(st.run_keys) + 2 * len(st.rejected_ns) for st in stamps) > stamps_module._DENSE_MIN_VALUES
    dense = interval_samples(stamps, 10**9)
    monkeypatch.setattr(stamps_module, "_DENSE_MIN_VALUES", 10**12)
    assert _figures(dense) == _figures(interval_samples(stamps, 10**9))
    assert sum(s.counts.total for s in dense if s.step == STEP_SOURCE) == 3 * 60_000
