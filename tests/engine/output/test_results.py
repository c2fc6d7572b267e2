"""Committed output: batch files written by state tasks, visible once Spark's commit log says so."""
from __future__ import annotations

import numpy as np

from engine.spark.batch_output import stamp_frames, write_shard_metrics, write_shard_results
from engine.output.results import RESULT_BLOCK_DTYPE, BatchTail, commit_log_dir, committed_batch, read_committed


def _rows(seqs: list[int]) -> np.ndarray:
    rows = np.zeros(len(seqs), dtype=RESULT_BLOCK_DTYPE)
    rows["seq"] = seqs
    rows["ingest_ns"] = [s * 10 for s in seqs]
    rows["frame"]["account"] = seqs
    return rows


def _write(out, batch: int, shard: int, seqs: list[int], samples: bytes = b"") -> None:
    frames, sidecar = stamp_frames(_rows(seqs), now_ns=123) if seqs else (b"", b"")
    write_shard_results(out, batch, shard, frames, sidecar)
    if samples:
        write_shard_metrics(out, batch, shard, samples, b"{}")


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


def test_a_torn_metrics_file_is_skipped_not_fatal(tmp_path):
    out = tmp_path / "state" / "results"
    _write(out, 0, 0, [5], samples=b"m0")
    _write(out, 0, 1, [6], samples=b"m1")
    (out / "batches" / f"{0:012d}" / "1.metrics").write_bytes(b'{"worker": "h/p1", "end')   # power cut
    _commit(out, 0)
    (m,) = BatchTail(out).poll()
    assert m.metrics == [b"m0"] and m.busy == [b"{}"] and m.count == 2
