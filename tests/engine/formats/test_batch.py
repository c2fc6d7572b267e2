"""Committed output: batch files written by state tasks, visible once Spark's commit log says so."""
from __future__ import annotations

import logging
import os

import numpy as np

from engine.formats.batch import (BatchTail, ShardFigures, batch_dir, commit_log_dir, committed_batch, read_batch,
                                  read_committed, stamp_frames)
from tests.batch_files import write_shard_results
from engine.formats.result_frames import RESULT_BLOCK_DTYPE


def _rows(seqs: list[int]) -> np.ndarray:
    rows = np.zeros(len(seqs), dtype=RESULT_BLOCK_DTYPE)
    rows["seq"] = seqs
    rows["ingest_ns"] = [s * 10 for s in seqs]
    rows["frame"]["account"] = seqs
    return rows


def _write(out, batch: int, shard: int, seqs: list[int], samples: bytes = b"", busy: bytes = b"{}") -> None:
    frames, sidecar = stamp_frames(_rows(seqs), now_ns=123) if seqs else (b"", b"")
    write_shard_results(out, batch, shard, frames, sidecar, ShardFigures(samples, busy) if samples else None)


def _write_old_layout(out, batch: int, shard: int, seqs: list[int], samples: bytes, busy: bytes = b"{}") -> None:
    """A batch as the previous version wrote it: figures in their own `<shard>.metrics` file."""
    _write(out, batch, shard, seqs)
    (batch_dir(out, batch) / f"{shard}.metrics").write_bytes(busy + b"\n" + samples)


def _commit(out, batch: int) -> None:
    d = commit_log_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    (d / str(batch)).write_text("v1\n{}")


def test_only_batches_in_sparks_commit_log_are_visible(tmp_path):
    out = tmp_path / "state" / "results"
    assert committed_batch(out) == -1
    _write(out, 0, 0, [1, 3])
    _write(out, 0, 1, [2])
    _write(out, 1, 1, [], samples=b'{"s": 1}')          # samples only, no results
    _write(out, 2, 0, [7])                              # written, not committed
    _commit(out, 0)
    _commit(out, 1)
    (commit_log_dir(out) / ".2.abc.tmp").write_text("")  # Spark's temp file of an atomic write
    assert committed_batch(out) == 1
    frames, side = read_committed(out)
    assert side[:, 0].tolist() == [1, 3, 2] and frames["timestamp"].tolist() == [123] * 3
    assert frames["account"].tolist() == [1, 3, 2]


def test_a_rerun_batch_rewrites_instead_of_adding(tmp_path):
    out = tmp_path / "state" / "results"
    _write(out, 0, 0, [1, 2, 3])
    _write(out, 0, 0, [1, 2, 3])                        # Spark ran batch 0 again after a crash
    _commit(out, 0)
    assert read_committed(out)[1][:, 0].tolist() == [1, 2, 3]


def test_tail_reads_each_committed_batch_once_even_after_spark_purges_old_entries(tmp_path):
    out = tmp_path / "state" / "results"
    tail = BatchTail(out)
    assert tail.poll() == []
    for b in range(3):
        _write(out, b, 0, [b], samples=f"m{b}".encode())
    _commit(out, 0)
    got = tail.poll()
    assert [m.batch for m in got] == [0] and got[0].metrics == [b"m0"] and got[0].count == 1
    _commit(out, 1)
    _commit(out, 2)
    (commit_log_dir(out) / "0").unlink()                 # Spark keeps only recent entries
    (commit_log_dir(out) / "1").unlink()
    got = tail.poll()
    assert [m.batch for m in got] == [1, 2] and tail.count == 3
    assert got[0].committed_ns == 0 and got[1].committed_ns > 0
    assert tail.poll() == []


def test_a_torn_metrics_file_of_the_old_layout_is_skipped_not_fatal(tmp_path):
    out = tmp_path / "state" / "results"
    _write_old_layout(out, 0, 0, [5], samples=b"m0")
    _write_old_layout(out, 0, 1, [6], samples=b"m1")
    (out / "batches" / f"{0:012d}" / "1.metrics").write_bytes(b'{"worker": "h/p1", "end')   # power cut
    _commit(out, 0)
    (m,) = BatchTail(out).poll()
    assert m.metrics == [b"m0"] and m.busy == [b"{}"] and m.count == 2


def test_results_and_metrics_are_two_files_and_read_back_whole(tmp_path):
    out = tmp_path / "state" / "results"
    _write(out, 0, 0, [1, 3], samples=b"m0\n{x}", busy=b'{"b": 0}')
    _write(out, 0, 1, [2], samples=b"m1", busy=b'{"b": 1}')
    _write(out, 0, 10, [4])                                 # metrics off for this one
    assert sorted(os.listdir(batch_dir(out, 0))) == ["0.bin", "0.seq", "1.bin", "1.seq", "10.bin", "10.seq"]
    _commit(out, 0)
    frames, side = read_committed(out)
    assert side.tolist() == [[1, 10], [3, 30], [2, 20], [4, 40]]
    assert frames["account"].tolist() == [1, 3, 2, 4]
    m = read_batch(out, 0)
    assert m.count == 4 and [p.name for p in m.parts] == ["0.bin", "1.bin", "10.bin"]
    assert m.metrics == [b"m0\n{x}", b"m1"] and m.busy == [b'{"b": 0}', b'{"b": 1}']


def test_a_batch_without_results_writes_its_metrics_in_one_file(tmp_path):
    out = tmp_path / "state" / "results"
    _write(out, 0, 0, [], samples=b"m0")
    _write(out, 0, 1, [5], samples=b"m1")
    assert sorted(os.listdir(batch_dir(out, 0))) == ["0.seq", "1.bin", "1.seq"]
    _commit(out, 0)
    m = read_batch(out, 0)
    assert m.metrics == [b"m0", b"m1"] and m.count == 1 and read_committed(out)[1].tolist() == [[5, 50]]


def test_a_torn_metrics_trailer_is_skipped_and_the_results_stay_whole(tmp_path, caplog):
    out = tmp_path / "state" / "results"
    _write(out, 0, 0, [1, 2], samples=b"m0")
    _write(out, 0, 1, [3], samples=b"m1")
    _write(out, 0, 2, [], samples=b"m2")
    _write(out, 0, 3, [], samples=b"m3")
    d = batch_dir(out, 0)
    os.truncate(d / "1.seq", (d / "1.seq").stat().st_size - 1)       # power cuts
    with open(d / "2.seq", "r+b") as f:
        f.seek(20)
        f.write(b"\0" * 4)                                            # a block that never reached the disk
    os.truncate(d / "3.seq", 0)
    _commit(out, 0)
    with caplog.at_level(logging.WARNING, logger="engine.formats.batch"):
        (m,) = BatchTail(out).poll()
    assert m.metrics == [b"m0"] and m.busy == [b"{}"] and m.count == 3
    torn = [r.getMessage() for r in caplog.records if "is torn" in r.getMessage()]
    assert len(torn) == 3 and all("latency figures are skipped" in t for t in torn)
    assert read_committed(out)[1][:, 0].tolist() == [1, 2, 3]


def test_a_folder_of_the_old_layout_still_reads(tmp_path):
    out = tmp_path / "state" / "results"
    _write_old_layout(out, 0, 0, [1, 2], samples=b"m0")
    _write_old_layout(out, 0, 1, [], samples=b"m1")              # no results: the .metrics file alone
    _write(out, 1, 0, [7], samples=b"new")                       # the next batch, by this version
    assert sorted(os.listdir(batch_dir(out, 0))) == ["0.bin", "0.metrics", "0.seq", "1.metrics"]
    _commit(out, 1)
    got = BatchTail(out).poll()
    assert [m.metrics for m in got] == [[b"m0", b"m1"], [b"new"]] and [m.count for m in got] == [2, 1]
    assert read_committed(out)[1][:, 0].tolist() == [1, 2, 7]


def test_a_rerun_after_an_upgrade_counts_its_figures_once(tmp_path):
    out = tmp_path / "state" / "results"
    _write_old_layout(out, 0, 0, [1], samples=b"old")            # the previous version, then a crash
    _write(out, 0, 0, [1], samples=b"new")                       # this version runs the batch again
    _commit(out, 0)
    assert read_batch(out, 0).metrics == [b"new"]


def test_a_rerun_with_fewer_figures_leaves_no_stale_bytes(tmp_path):
    out = tmp_path / "state" / "results"
    _write(out, 0, 0, [1, 2], samples=b"a long first run's samples")
    _write(out, 0, 0, [1, 2], samples=b"short")
    _commit(out, 0)
    assert read_batch(out, 0).metrics == [b"short"] and read_committed(out)[1][:, 0].tolist() == [1, 2]
