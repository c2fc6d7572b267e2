"""Chunks: cutting the log per shard, the chain that keeps arrival order, recovery, GC."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from engine.chunks import (Chunk, ChunkChain, chunk_dir, chunk_name, chunk_origin, chunk_records_of,
                           parse_chunk_name, read_chunked)
from engine.config import Config
from engine.fixish import FrameScanner, decode_payload, iter_frames
from engine.ingress_log import LogReader, LogWriter, read_head, wait_for, write_consumed
from engine.records import CHUNK_DTYPE, decode_events, shard_of
from engine.results import read_committed, result_tuples
from engine.rule import reference_results
from engine.tools.generate import generate


def _chunks(log_dir) -> dict[tuple[int, int, int], np.ndarray]:
    out = {}
    for e in os.scandir(chunk_dir(log_dir)):
        p = parse_chunk_name(e.name)
        if p is not None:
            with open(e.path, "rb") as f:
                out[p] = np.frombuffer(chunk_records_of(f.read()), dtype=CHUNK_DTYPE)
    return out


def _payloads(tmp_path, n=2_000, seed=1):
    nbbo, orders = tmp_path / "n.msg", tmp_path / "o.msg"
    generate(nbbo, orders, symbols=40, nbbo=n, orders=n, seed=seed)
    out = []
    for path, stream in ((nbbo, "nbbo"), (orders, "orders")):
        data = path.read_bytes()
        out.append((FrameScanner(stream).scan(data, final=True).payloads,
                    [decode_payload(p) for p in iter_frames(data)]))
    return out


def test_cuts_cover_the_log_once_per_shard_in_seq_order(tmp_path):
    log = tmp_path / "log"
    w = LogWriter(log, shards=3, chunk_records=700)
    for payloads, _ in _payloads(tmp_path):
        for i in range(0, len(payloads), 300):
            w.append(payloads[i:i + 300], time.time_ns())
            w.commit()
    w.close()
    head = read_head(log)
    chunks = _chunks(log)
    assert read_chunked(log) == head
    # every cut [a, b) has one file per shard, the cuts tile [0, head)
    cuts = sorted({(a, b) for a, b, _ in chunks})
    assert cuts[0][0] == 0 and cuts[-1][1] == head
    assert all(x[1] == y[0] for x, y in zip(cuts, cuts[1:]))
    assert all((a, b, k) in chunks for a, b in cuts for k in range(3))
    assert max(b - a for a, b in cuts) <= 700
    # each record is in exactly one chunk, of its symbol's shard, in seq order
    recs = LogReader(log).read(0, head)
    seen = np.zeros(head, dtype=int)
    for (a, b, k), c in chunks.items():
        assert np.all(np.diff(c["seq"]) > 0) and np.all((c["seq"] >= a) & (c["seq"] < b))
        assert np.array_equal(c["rec"], recs[c["seq"]])
        ev = decode_events(np.ascontiguousarray(c["rec"]), c["seq"])
        assert np.all(shard_of(ev["symbol"], 3) == k)
        seen[c["seq"]] += 1
    assert np.all(seen == 1)


def test_a_reopened_writer_recuts_what_a_crash_left_uncut(tmp_path):
    log = tmp_path / "log"
    (payloads, _), _ = _payloads(tmp_path, n=1_000)
    w = LogWriter(log, chunk_records=10_000, chunk_interval_s=3600)
    w.append(payloads, time.time_ns())
    w.commit()                              # durable, but the cut is still pending: a crash now
    assert read_chunked(log) == 0 and not _chunks(log)
    w2 = LogWriter(log, chunk_records=10_000)     # reopened: re-cuts [chunked, head)
    assert read_chunked(log) == read_head(log) == len(payloads)
    assert sum(len(c) for c in _chunks(log).values()) == len(payloads)
    w2.close()


def test_chunks_below_consumed_are_deleted(tmp_path):
    log = tmp_path / "log"
    (payloads, _), _ = _payloads(tmp_path, n=1_000)
    w = LogWriter(log, chunk_records=250)
    w.append(payloads, time.time_ns())
    w.close()
    cuts = sorted({(a, b) for a, b, _ in _chunks(log)})
    write_consumed(log, cuts[2][1])
    w = LogWriter(log, chunk_records=250)
    w.tick()
    assert sorted({(a, b) for a, b, _ in _chunks(log)}) == cuts[3:]
    assert chunk_origin(log) == cuts[3][0]
    w.close()


def test_another_shard_count_is_refused(tmp_path):
    LogWriter(tmp_path / "log", shards=2).close()
    with pytest.raises(ValueError, match="same --shards"):
        LogWriter(tmp_path / "log", shards=4)


def test_chain_applies_in_range_order_and_waits_across_a_gap():
    c = [Chunk(a, b, bytes([i])) for i, (a, b) in enumerate([(0, 10), (10, 25), (25, 30), (30, 31)])]
    chain = ChunkChain(0, [])
    assert chain.take([c[2], c[0]]) == [c[0]]           # (10, 25) missing: (25, 30) waits
    assert chain.upto == 10 and chain.waiting == [c[2]]
    ranges, data = chain.waiting_bytes()
    chain = ChunkChain(chain.upto, ChunkChain.waiting_from(ranges, data))   # through a state row
    assert chain.take([c[3], c[1]]) == [c[1], c[2], c[3]]
    assert chain.upto == 31 and chain.waiting == []
    assert chain.take([c[1]]) == []                    # an applied range is never applied twice


def test_job_keeps_arrival_order_when_a_chunk_shows_up_late(spark, tmp_path):
    """Hide one cut's files while the job runs, then let them appear: results stay exact."""
    from engine.job import start_query, stop_query
    cfg = Config.from_env(state_dir=tmp_path / "state")
    msgs = []
    w = LogWriter(cfg.log_dir, chunk_records=1_000)
    for payloads, m in _payloads(tmp_path, n=3_000, seed=4):
        w.append(payloads, time.time_ns())
        msgs += m
    w.close()
    head = read_head(cfg.log_dir)
    late = sorted({(a, b) for a, b, _ in _chunks(cfg.log_dir)})[1]
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for k in range(cfg.shards):
        os.rename(chunk_dir(cfg.log_dir) / chunk_name(*late, k), hidden / chunk_name(*late, k))
    from engine.ingress_log import read_consumed
    query = start_query(spark, cfg)
    try:
        assert wait_for(lambda: query.lastProgress is not None, 120)
        assert wait_for(lambda: read_consumed(cfg.log_dir) == late[0], 60)
        time.sleep(1.0)
        assert read_consumed(cfg.log_dir) == late[0]     # everything after the gap waits
        for k in range(cfg.shards):
            os.rename(hidden / chunk_name(*late, k), chunk_dir(cfg.log_dir) / chunk_name(*late, k))
        assert wait_for(lambda: read_consumed(cfg.log_dir) == head, 120)
    finally:
        stop_query(spark, query)
    frames, side = read_committed(cfg.out_dir)
    assert len(np.unique(side[:, 0])) == len(side)
    assert result_tuples(frames[np.argsort(side[:, 0], kind="stable")]) == reference_results(msgs)


def test_a_shard_without_events_still_advances(spark, tmp_path):
    """One symbol: every cut leaves the other shard empty (Spark's file source skips
    zero-length files, so empty chunks carry a header and still arrive)."""
    from engine.fixish import Nbbo, Order, encode_nbbo, encode_order
    from engine.job import start_query, stop_query
    from engine.ingress_log import read_consumed
    cfg = Config.from_env(state_dir=tmp_path / "state")
    t = b"20170101-00:00:00.000"
    msgs = [Nbbo(b"AAPL", t, 10.0, 10.5), Order(1, 7, b"abcdef", b"AAPL", 100.0, 10.2, t)]
    w = LogWriter(cfg.log_dir, chunk_records=1)
    for m, stream in zip(msgs, ("nbbo", "orders")):
        frame = encode_nbbo(m) if stream == "nbbo" else encode_order(m)
        w.append(FrameScanner(stream).scan(frame, final=True).payloads, time.time_ns())
    w.close()
    assert any(len(c) == 0 for c in _chunks(cfg.log_dir).values())
    query = start_query(spark, cfg)
    try:
        assert wait_for(lambda: read_consumed(cfg.log_dir) == 2, 120)
    finally:
        stop_query(spark, query)
    frames, _ = read_committed(cfg.out_dir)
    assert result_tuples(frames) == reference_results(msgs)
