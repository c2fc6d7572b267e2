"""Per-shard files: the same records as the log's shard split, with their seqs, or a fall back to the log."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from engine.config import Config
from engine.formats import shard_files
from engine.formats.log import LogReader, LogWriter, read_head, write_consumed
from engine.formats.shard_files import (COVERED, SHARD_RECORD_BYTES, ShardFileWriter, delete_shard_segments,
                                        read_shard, split_records)
from marketspread.retention_worker import RetentionWorker
from engine.tools.generate import random_payloads
from engine.wire.fixish import NBBO_FIELDS, NBBO_TYPE, ORDER_TYPE
from engine.formats.records import PAYLOAD_OFFSET, record_symbols, shard_rows
from tests.tmpfs import fill, mounted_tmpfs

SPAN = 1000                     # records per log segment (and shard segment span) in these tests


def _payloads(n: int, seed: int, symbols: int = 50, bad_types: bool = False) -> np.ndarray:
    """NBBO and order payloads (56 bytes, as the log stores them) over `symbols` symbols."""
    return random_payloads(n, symbols, seed, (NBBO_TYPE, ORDER_TYPE, 0, 9, 255) if bad_types else (NBBO_TYPE, ORDER_TYPE))


def _log(log_dir: Path, n_shards: int, chunks: list[np.ndarray], consumed: int = 0):
    """A log written in one commit per chunk, with shard files following it; returns (writer, shards)."""
    if consumed:
        write_consumed(log_dir, consumed)
    w = LogWriter(log_dir, segment_records=SPAN, fsync=False)
    sf = ShardFileWriter.open(w, n_shards, consumed)
    for i, c in enumerate(chunks):
        w.append(c, 1_000 + i)
        w.commit()
    return w, sf


def _expected(log_dir: Path, n_shards: int, shard: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    rec = LogReader(log_dir, SPAN).read(lo, hi)
    mine = shard_rows(rec, n_shards, shard)
    return lo + mine, rec[mine]


def _assert_reads_equal_log(log_dir: Path, n_shards: int, lo: int, hi: int) -> None:
    total = 0
    for s in range(n_shards):
        got = read_shard(log_dir, n_shards, s, lo, hi)
        assert got is not None, (s, lo, hi)
        seq, rec = _expected(log_dir, n_shards, s, lo, hi)
        assert np.array_equal(got.seq, seq) and np.array_equal(got.rec, rec), (s, lo, hi)
        total += len(seq)
    assert total == hi - lo


@pytest.mark.parametrize("n_shards", [2, 3, 4, 8])
def test_split_gives_each_shard_exactly_what_shard_rows_keeps(n_shards):
    rec = np.zeros((5000, 64), np.uint8)
    rec[:, PAYLOAD_OFFSET:] = _payloads(5000, seed=n_shards, symbols=400)
    parts = split_records(70, rec, n_shards)
    assert sum(len(p) for p in parts) == len(rec)
    for s, part in enumerate(parts):
        mine = shard_rows(rec, n_shards, s)
        assert np.array_equal(part["seq"], 70 + mine)
        assert np.array_equal(part["rec"], rec[mine])
    assert split_records(0, rec[:0], n_shards) and all(len(p) == 0 for p in split_records(0, rec[:0], n_shards))


def test_records_round_trip_with_their_seqs_across_segments_and_commits(tmp_path):
    chunks = [_payloads(n, seed=i) for i, n in enumerate([1, 700, 299, 1, 2500, 37, 1462])]   # 5000 records
    w, sf = _log(tmp_path, 4, chunks)
    assert read_head(tmp_path) == 5000 and sf.covered == 5000
    for lo, hi in [(0, 5000), (0, 1), (999, 1001), (1000, 2000), (1234, 4321), (4999, 5000), (3000, 3001)]:
        _assert_reads_equal_log(tmp_path, 4, lo, hi)
    got = read_shard(tmp_path, 4, 1, 0, 5000)
    assert SHARD_RECORD_BYTES * len(got.seq) <= got.nbytes < SHARD_RECORD_BYTES * len(got.seq) + 8 * 64 * 5
    # every span has a file for every shard, and a segment holds only its span's records
    files = sorted((tmp_path / "shards-4").glob("*/*/seg-*.log"))
    assert len(files) == 4 * 5
    assert read_shard(tmp_path, 4, 0, 10, 10) is None             # an empty range: nothing to read
    w.close()
    sf.close()


def test_on_a_shared_file_system_every_write_is_flushed_before_covered_moves(tmp_path):
    """(NFS and the like: another machine reads only flushed data; here the same files, flushed.)"""
    w = LogWriter(tmp_path, segment_records=SPAN, fsync=False)
    sf = ShardFileWriter(tmp_path, 2, 0, SPAN, sync=True)
    w.on_durable = sf.add
    for i in range(3):
        w.append(_payloads(900, seed=i), i)
        w.commit()
    assert sf.sync and sf.covered == 2700
    _assert_reads_equal_log(tmp_path, 2, 0, 2700)


def test_one_shard_writes_nothing_and_removes_stale_shard_files(tmp_path):
    _log(tmp_path, 2, [_payloads(100, 1)])
    assert list(tmp_path.glob("shards-*"))
    w = LogWriter(tmp_path, segment_records=SPAN, fsync=False)
    assert ShardFileWriter.open(w, 1, 0) is None and w.on_durable is None
    assert not list(tmp_path.glob("shards-*"))
    assert read_shard(tmp_path, 2, 0, 0, 100) is None


def test_a_reader_falls_back_to_the_log_where_the_files_do_not_cover_the_range(tmp_path):
    w, sf = _log(tmp_path, 2, [_payloads(2500, 1)], consumed=0)
    assert read_shard(tmp_path, 2, 0, 0, 2500) is not None
    assert read_shard(tmp_path, 2, 0, 0, 2501) is None            # beyond `covered`
    assert read_shard(tmp_path, 4, 0, 0, 100) is None             # written for another shard count
    gen = sf.dir
    os.unlink(gen / "1" / "seg-00000000000000001000.log")         # a deleted segment: never "no records"
    assert read_shard(tmp_path, 2, 1, 1500, 1600) is None
    assert read_shard(tmp_path, 2, 1, 2000, 2500) is not None
    # An ingress restart: from `consumed` on only, in a new generation the reader takes.
    w.close()
    sf.close()
    write_consumed(tmp_path, 1200)
    w2 = LogWriter(tmp_path, segment_records=SPAN, fsync=False)
    sf2 = ShardFileWriter.open(w2, 2, 1200)
    assert sf2.dir != gen and not gen.exists()
    assert read_shard(tmp_path, 2, 0, 1199, 1300) is None         # below the new start
    _assert_reads_equal_log(tmp_path, 2, 1200, 2500)


def test_rebuild_after_a_crash_gives_exactly_the_logs_records(tmp_path):
    w, sf = _log(tmp_path, 3, [_payloads(n, seed=n) for n in (800, 900, 700)])
    # A crash mid-write of the shard files: one file cut inside a record, `covered` stale
    # both ways, and log records appended (after the last commit) that no shard file has.
    victim = next(sf.dir.glob("1/seg-00000000000000002000.log"))
    os.truncate(victim, victim.stat().st_size - 30)
    (sf.dir / COVERED).write_bytes((10_000).to_bytes(8, "little"))
    w.append(_payloads(250, seed=5), 7)                             # size 2650 > head 2400, then the
    sf.close()                                                      # process dies: no commit, no close
    write_consumed(tmp_path, 1500)
    w2 = LogWriter(tmp_path, segment_records=SPAN, fsync=False)     # recovers head from the segments
    assert w2.head == 2650
    sf2 = ShardFileWriter.open(w2, 3, 1500)
    assert sf2.covered == 2650 and read_shard(tmp_path, 3, 0, 1499, 1600) is None
    _assert_reads_equal_log(tmp_path, 3, 1500, 2650)
    w2.append(_payloads(1200, seed=6), 8)                           # and it follows new commits
    w2.commit()
    _assert_reads_equal_log(tmp_path, 3, 1500, 3850)
    assert [p.name for p in (tmp_path / "shards-3").iterdir()] == [sf2.dir.name]


def test_a_record_with_a_bad_type_byte_lands_in_one_shard_deterministically(tmp_path):
    p = _payloads(3000, seed=9, bad_types=True)
    rec = np.zeros((3000, 64), np.uint8)
    rec[:, PAYLOAD_OFFSET:] = p
    odd = (p[:, 0] != NBBO_TYPE) & (p[:, 0] != ORDER_TYPE)
    assert odd.sum() > 500
    nbbo_place = rec[:, PAYLOAD_OFFSET + NBBO_FIELDS["symbol"]:PAYLOAD_OFFSET + NBBO_FIELDS["symbol"] + 4]
    sym = record_symbols(rec)
    assert np.array_equal(sym[odd], nbbo_place[odd].copy().view(">i4").reshape(-1))   # read where an NBBO has it
    a, b = split_records(0, rec, 4), split_records(0, rec.copy(), 4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    _log(tmp_path, 4, [p[:1000], p[1000:]])
    _assert_reads_equal_log(tmp_path, 4, 0, 3000)


def _commit(cp: Path, batch: int, end_seq: int) -> None:
    """A commit log entry and its offset log entry, as Spark writes them."""
    (cp / "commits").mkdir(parents=True, exist_ok=True)
    (cp / "offsets").mkdir(parents=True, exist_ok=True)
    (cp / "offsets" / str(batch)).write_text("v1\n" + json.dumps({"batchWatermarkMs": 0, "conf": {}})
                                             + "\n" + json.dumps({"seq": end_seq}))
    (cp / "commits" / str(batch)).write_text("v1\n{}")


@pytest.mark.parametrize("keep_log", [False, True])
def test_retention_removes_shard_segments_below_what_the_job_may_read(tmp_path, keep_log):
    cfg = Config(state_dir=tmp_path / "state", log_retention=not keep_log, results_retention="0",
                 results_retention_bytes="0")
    w, sf = _log(cfg.log_dir, 2, [_payloads(3500, 4)])
    worker = RetentionWorker(cfg, segment_records=SPAN)
    worker.run_once()
    assert len(list(sf.dir.glob("*/seg-*.log"))) == 2 * 4            # nothing committed: all kept
    _commit(cfg.checkpoint_dir, 3, 2500)
    p = worker.run_once()
    firsts = sorted({f.name for f in sf.dir.glob("*/seg-*.log")})
    assert firsts == ["seg-00000000000000002000.log", "seg-00000000000000003000.log"]
    assert p.log_bytes >= 2000 * SHARD_RECORD_BYTES + (0 if keep_log else 2000 * 64)
    _assert_reads_equal_log(cfg.log_dir, 2, 2500, 3500)            # what a restart re-reads is there
    assert read_shard(cfg.log_dir, 2, 0, 1500, 2500) is None        # gone: the reader would take the log
    assert delete_shard_segments(cfg.log_dir, 10**9) > 0             # the open span goes only when told
    w.close()


def test_a_full_disk_costs_the_shard_files_never_the_log_and_they_come_back(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(shard_files, "RETRY_S", 0.2)
    with mounted_tmpfs(tmp_path / "disk", 2) as disk:
        log_dir = disk / "ingress"
        w, sf = _log(log_dir, 2, [_payloads(500, 1)])
        w.append(_payloads(500, 2), 2)             # in the log (page cache) before the disk fills
        filler = disk / "filler"
        fill(filler)
        w.commit()                                  # the log commit stands; the shard write failed
        assert read_head(log_dir) == 1000 and sf.covered < 1000
        assert any("shard files stopped" in r.getMessage() for r in caplog.records)
        assert read_shard(log_dir, 2, 0, 0, 1000) is None
        filler.unlink()
        time.sleep(0.25)
        w.append(_payloads(300, 3), 3)
        w.commit()                                  # a new generation from where the files stopped
        assert sf.covered == 1300
        _assert_reads_equal_log(log_dir, 2, 500, 1300)
        assert read_shard(log_dir, 2, 0, 0, 1300) is None
        w.close()
        sf.close()
