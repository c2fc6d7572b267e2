"""The retention worker: what it deletes in a state folder, and what readers see after it."""
from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from engine.config import Config
from engine.formats.batch import BatchTail, read_committed, read_retained, retained_from, stamp_frames
from engine.formats.log import LogReader, LogWriter, segment_firsts, write_hold
from engine.formats.result_frames import RESULT_BLOCK_DTYPE, RESULT_FRAME
from engine.output.forwarder import ResultForwarder
from engine.spark.checkpoint import committed_end_offset
from engine.tools.receiver import Receiver
from engine.wire.fixish import RESULT_LEN
from marketspread.retention_worker import RetentionWorker
from tests.batch_files import write_shard_results


def _write_batch(out, batch: int, seqs: list[int]) -> None:
    rows = np.zeros(len(seqs), dtype=RESULT_BLOCK_DTYPE)
    rows["seq"], rows["ingest_ns"] = seqs, seqs
    rows["frame"]["len"] = RESULT_LEN
    rows["frame"]["account"] = seqs
    frames, sidecar = stamp_frames(rows, now_ns=123)
    write_shard_results(out, batch, 0, frames, sidecar)


def _commit(cp, batch: int, end_seq: int) -> None:
    """A commit log entry and its offset log entry, as Spark writes them."""
    (cp / "commits").mkdir(parents=True, exist_ok=True)
    (cp / "offsets").mkdir(parents=True, exist_ok=True)
    (cp / "offsets" / str(batch)).write_text("v1\n" + json.dumps({"batchWatermarkMs": 0, "conf": {}})
                                             + "\n" + json.dumps({"seq": end_seq}))
    (cp / "commits" / str(batch)).write_text("v1\n{}")


def _cfg(tmp_path, **kw) -> Config:
    return Config(state_dir=tmp_path / "state", **kw)


def test_worker_deletes_committed_log_segments_and_keeps_what_a_restart_or_a_hold_needs(tmp_path):
    cfg = _cfg(tmp_path, results_retention="0", results_retention_bytes="0")
    w = LogWriter(cfg.log_dir, segment_records=100, fsync=False)
    w.append(np.zeros((350, 56), np.uint8), 1)
    w.close()
    worker = RetentionWorker(cfg, segment_records=100)
    assert worker.run_once().segments == 0                      # nothing committed yet
    _commit(cfg.checkpoint_dir, 4, 250)
    (cfg.checkpoint_dir / "offsets" / "5").write_text("v1\n{}\n{\"seq\": 340}")   # planned, not committed
    assert committed_end_offset(cfg.checkpoint_dir) == 250
    write_hold(cfg.log_dir, 150)
    p = worker.run_once()
    assert (p.segments, p.log_bytes) == (1, 100 * 64) and segment_firsts(cfg.log_dir) == [100, 200, 300]
    (cfg.log_dir / "hold").unlink()
    worker.run_once()
    assert segment_firsts(cfg.log_dir) == [200, 300]
    assert LogReader(cfg.log_dir, segment_records=100).read(250, 350).shape == (100, 64)   # a restart re-reads this
    with pytest.raises(FileNotFoundError):
        LogReader(cfg.log_dir, segment_records=100).read(150, 250)
    kept = RetentionWorker(_cfg(tmp_path, log_retention=False, results_retention="0", results_retention_bytes="0"),
                           segment_records=100)
    _commit(cfg.checkpoint_dir, 5, 350)
    assert kept.run_once().segments == 0 and segment_firsts(cfg.log_dir) == [200, 300]


def test_worker_deletes_result_batches_by_size_and_readers_see_whole_batches_only(tmp_path, caplog):
    cfg = _cfg(tmp_path, results_retention="0", results_retention_bytes="1")   # as small as possible
    for b in range(6):
        _write_batch(cfg.out_dir, b, [10 * b, 10 * b + 1])
    tail = BatchTail(cfg.out_dir, reader="test reader")
    _commit(cfg.checkpoint_dir, 0, 10)
    assert [m.batch for m in tail.poll()] == [0]
    for b in range(1, 5):
        _commit(cfg.checkpoint_dir, b, 10 * (b + 1))               # 5 written, not committed
    p = RetentionWorker(cfg).run_once()
    assert p.batches == 4 and p.results_bytes > 0 and retained_from(cfg.out_dir) == 4
    assert sorted(os.listdir(cfg.out_dir / "batches")) == [f"{4:012d}", f"{5:012d}"]
    with caplog.at_level(logging.WARNING, logger="engine.formats.batch"):
        got = tail.poll()
    assert [m.batch for m in got] == [4] and tail.missed == 3 and tail.next_batch == 5
    assert "test reader fell behind the results retention: batches 1..3 (3 batches)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="engine.formats.batch"):
        frames, side = read_committed(cfg.out_dir)
    assert side[:, 0].tolist() == [40, 41] and frames["account"].tolist() == [40, 41]
    assert "batches 0..3 (4 batches) were deleted by retention" in caplog.text
    r = read_retained(cfg.out_dir)
    assert (r.first, r.last) == (4, 4)


def test_worker_keeps_every_batch_under_the_bounds(tmp_path):
    cfg = _cfg(tmp_path)                                             # defaults: 24h, 10GiB
    for b in range(3):
        _write_batch(cfg.out_dir, b, [b])
        _commit(cfg.checkpoint_dir, b, b + 1)
    assert RetentionWorker(cfg).run_once().batches == 0 and retained_from(cfg.out_dir) == 0
    assert read_committed(cfg.out_dir)[1][:, 0].tolist() == [0, 1, 2]


def test_a_forwarder_behind_retention_says_how_many_batches_it_missed_and_sends_the_rest_once(tmp_path, caplog):
    cfg = _cfg(tmp_path, results_retention="0", results_retention_bytes="1")
    for b in range(8):
        _write_batch(cfg.out_dir, b, [b])
        _commit(cfg.checkpoint_dir, b, b + 1)
    RetentionWorker(cfg).run_once()                                  # keeps batch 7 only
    assert retained_from(cfg.out_dir) == 7
    for b in range(8, 10):
        _write_batch(cfg.out_dir, b, [b])
        _commit(cfg.checkpoint_dir, b, b + 1)
    with Receiver("127.0.0.1", 0, tmp_path / "got.bin") as rec, \
            caplog.at_level(logging.WARNING, logger="engine.formats.batch"):
        fwd = ResultForwarder(cfg.out_dir, "127.0.0.1", rec.port).start()
        assert rec.wait_for(3, timeout=30)
        fwd.stop()
    got = np.fromfile(tmp_path / "got.bin", dtype=RESULT_FRAME)
    assert got["account"].tolist() == [7, 8, 9] and fwd.missed == 7
    assert "the result forwarder fell behind the results retention: batches 0..6 (7 batches)" in caplog.text
    assert (cfg.out_dir / "forwarded").read_text() == "10"
