"""A state task's batch files: latency metrics cost no file of their own.

The task runs here as Spark calls it (`make_check_market_data` on a planned Arrow row),
with a stand-in TaskContext, over a real ingress log; no Spark session.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from collector.backpressure import StepBusy
from engine.formats.log import LogWriter
from engine.formats.result_frames import RESULT_FRAME
from tests.batch_files import result_tuples
from engine.formats.batch import commit_log_dir, read_batch, read_committed, batch_dir
from engine.spark import job, shard_state, worker_memory
from engine.formats.stamps import decode_figures
from engine.spark.source import range_batch
from engine.tools.generate import generate
from engine.wire.fixish import FrameScanner
from engine.formats.records import shard_keys


class _Task:
    """What the task function asks of Spark's TaskContext."""

    def __init__(self, batch: int):
        self.batch = batch

    def getLocalProperty(self, name: str) -> str:
        assert name == job.BATCH_ID_PROPERTY
        return str(self.batch)

    def partitionId(self) -> int:
        return 0


def _log(tmp_path: Path, orders: int) -> tuple[Path, int]:
    """An ingress log of generated NBBOs and `orders` orders; return it and its record count."""
    nbbo_path, orders_path = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
    generate(nbbo_path, orders_path, symbols=40, nbbo=200, orders=max(orders, 1), wide_share=0.5, seed=3)
    log_dir = tmp_path / "log"
    w = LogWriter(log_dir, fsync=False)
    streams = [("nbbo", nbbo_path)] + [("orders", orders_path)] * bool(orders)
    for stream, path in streams:
        w.append(FrameScanner(stream).scan(path.read_bytes(), final=True).payloads, time.time_ns())
    n = w.commit()
    w.close()
    return log_dir, n


def _run_batch(monkeypatch, log_dir: Path, n: int, state: Path, metrics: bool) -> Path:
    """Run batch 0 of one shard over the whole log; return the results folder."""
    monkeypatch.setattr(worker_memory, "prepare", lambda: None)     # no gc.freeze in the test process
    monkeypatch.setattr(job.TaskContext, "get", staticmethod(lambda: _Task(0)))
    out, states = state / "results", state / "shard-state"
    shard_state.start_fresh(str(states))
    task = job.make_check_market_data(str(log_dir), str(out), str(states), 1, metrics=metrics)
    assert list(task([range_batch(shard_keys(1), 0, n)])) == []
    return out


def _files(out: Path) -> list[str]:
    d = batch_dir(out, 0)
    return sorted(os.listdir(d)) if d.is_dir() else []


def test_metrics_on_writes_the_same_files_as_metrics_off_and_reads_back_the_same(monkeypatch, tmp_path):
    log_dir, n = _log(tmp_path, orders=300)
    off = _run_batch(monkeypatch, log_dir, n, tmp_path / "off", metrics=False)
    on = _run_batch(monkeypatch, log_dir, n, tmp_path / "on", metrics=True)
    assert _files(on) == _files(off) == ["0.bin", "0.seq"]
    got_off, got_on = read_batch(off, 0), read_batch(on, 0)
    assert got_on.count == got_off.count > 0
    off_frames, on_frames = (np.fromfile(m.parts[0], dtype=RESULT_FRAME) for m in (got_off, got_on))
    assert result_tuples(on_frames) == result_tuples(off_frames)      # all but the write time
    assert got_off.metrics == got_off.busy == []
    [samples], [busy] = got_on.metrics, got_on.busy
    got = decode_figures(samples)
    assert {s.step for s in got} >= {"source", "check_market_data", "sink", "start-to-end"}
    assert sum(s.counts.total for s in got if s.step == "source") == n    # every event, once
    assert set(StepBusy.from_bytes(busy).busy_ns) == {"source", "check_market_data", "sink"}


def test_read_back_keys_are_the_results_own_with_metrics_on(monkeypatch, tmp_path):
    log_dir, n = _log(tmp_path, orders=300)
    keys = []
    for arm in (False, True):
        out = _run_batch(monkeypatch, log_dir, n, tmp_path / str(arm), metrics=arm)
        commit_log_dir(out).mkdir(parents=True)
        (commit_log_dir(out) / "0").write_text("v1\n{}")
        frames, side = read_committed(out)
        assert len(side) == len(frames) > 0
        keys.append(side.tolist())
    assert keys[0] == keys[1]


@pytest.mark.parametrize("metrics, files", [(False, []), (True, ["0.seq"])])
def test_a_batch_without_results_writes_one_file_with_metrics_and_none_without(monkeypatch, tmp_path,
                                                                              metrics, files):
    log_dir, n = _log(tmp_path, orders=0)
    out = _run_batch(monkeypatch, log_dir, n, tmp_path / "state", metrics=metrics)
    assert _files(out) == files
    m = read_batch(out, 0)
    assert m.parts == [] and m.count == 0
    assert len(m.metrics) == len(m.busy) == int(metrics)


def test_a_rerun_batch_rewrites_the_same_files(monkeypatch, tmp_path):
    log_dir, n = _log(tmp_path, orders=300)
    out = _run_batch(monkeypatch, log_dir, n, tmp_path / "state", metrics=True)
    first = read_batch(out, 0)
    out = _run_batch(monkeypatch, log_dir, n, tmp_path / "state", metrics=True)     # Spark ran batch 0 again
    again = read_batch(out, 0)
    assert _files(out) == ["0.bin", "0.seq"]
    assert again.count == first.count and len(again.metrics) == len(again.busy) == 1


def test_figures_follow_durable_results_in_the_same_sidecar(tmp_path):
    """The results' files are whole on disk before the figures are added, and no file is added for them."""
    from engine.formats.batch import KEY_BYTES, ShardFigures, ShardOutput, read_shard_figures

    frames, seqs = b"\x01" * 59 * 3, np.arange(6, dtype="<i8").tobytes()
    d = batch_dir(tmp_path, 7)
    with ShardOutput(tmp_path, 7, 1) as out:
        out.write_results(frames, seqs)
        # What the sink step's busy time covers: both files, their fsyncs, the folder's.
        assert (d / "1.bin").read_bytes() == frames and (d / "1.seq").read_bytes() == seqs
        out.write_figures(ShardFigures(b"samples", b'{"busy": 1}'))
    assert sorted(os.listdir(d)) == ["1.bin", "1.seq"]
    assert (d / "1.seq").read_bytes()[:3 * KEY_BYTES] == seqs
    sizes = {n: (d / n).stat().st_size for n in os.listdir(d)}
    assert read_shard_figures(d, 1, 3, sizes) == ShardFigures(b"samples", b'{"busy": 1}')
