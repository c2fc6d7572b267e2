"""Retention never follows a link out of the state folder, and the job refuses linked managed folders."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from engine.config import Config
from engine.formats.log import LogWriter, segment_firsts
from engine.formats.shard_files import delete_shard_segments
from engine.formats.batch import retained_from, batch_dir
from marketspread.retention_worker import RetentionWorker
from tests.marketspread.test_retention_worker import _commit, _write_batch

from ..cli_inprocess import run_main


def _outside(tmp_path: Path) -> Path:
    """A folder outside the state folder that a hostile link points at: files and a subfolder."""
    target = tmp_path / "precious"
    (target / "sub").mkdir(parents=True)
    for name in ("a.txt", "b.txt", "sub/c.txt"):
        (target / name).write_text("keep me")
    return target


def test_results_retention_unlinks_a_linked_batch_folder_never_its_target_and_removes_every_doomed_batch(tmp_path):
    target = _outside(tmp_path)
    cfg = Config(state_dir=tmp_path / "state", results_retention="0", results_retention_bytes="1")
    for b in range(8):
        _write_batch(cfg.out_dir, b, [10 * b])
        _commit(cfg.checkpoint_dir, b, 10 * (b + 1))
    linked = batch_dir(cfg.out_dir, 2)
    for f in linked.iterdir():
        f.unlink()
    linked.rmdir()
    linked.symlink_to(target, target_is_directory=True)
    (batch_dir(cfg.out_dir, 3) / "nested").mkdir()                   # a subfolder inside a batch
    (batch_dir(cfg.out_dir, 3) / "nested" / "x").write_text("x")
    (batch_dir(cfg.out_dir, 4) / "escape").symlink_to(target)       # a link inside a batch
    p = RetentionWorker(cfg).run_once()
    assert sorted(str(f.relative_to(target)) for f in target.rglob("*")) == ["a.txt", "b.txt", "sub", "sub/c.txt"]
    assert all((target / n).read_text() == "keep me" for n in ("a.txt", "b.txt", "sub/c.txt"))
    assert retained_from(cfg.out_dir) == 7 and p.batches == 7
    assert sorted(os.listdir(cfg.out_dir / "batches")) == [f"{7:012d}"]  # every doomed folder really went


def test_log_and_shard_retention_unlink_linked_segments_not_their_targets(tmp_path):
    target = _outside(tmp_path)
    log_dir = tmp_path / "state" / "ingress"
    w = LogWriter(log_dir, segment_records=100, fsync=False)
    w.append(np.zeros((350, 56), np.uint8), 1)
    w.close()
    seg0 = log_dir / "seg-00000000000000000000.log"
    seg0.unlink()
    seg0.symlink_to(target / "a.txt")
    cfg = Config(state_dir=tmp_path / "state", results_retention="0", results_retention_bytes="0")
    _commit(cfg.checkpoint_dir, 0, 250)
    RetentionWorker(cfg, segment_records=100).run_once()
    assert segment_firsts(log_dir) == [200, 300] and (target / "a.txt").read_text() == "keep me"
    gen = log_dir / "shards-2" / f"{0:020d}"
    (gen / "0").mkdir(parents=True)
    (gen / "span").write_bytes((100).to_bytes(8, "little"))
    (gen / "0" / "seg-00000000000000000000.log").symlink_to(target / "b.txt")
    delete_shard_segments(log_dir, 150)
    assert not (gen / "0" / "seg-00000000000000000000.log").is_symlink()
    assert (target / "b.txt").read_text() == "keep me"


def test_the_job_refuses_a_state_folder_whose_managed_folders_are_links(tmp_path):
    target = _outside(tmp_path)
    for managed in ("results", "checkpoint", "ingress", "results/batches"):
        state = tmp_path / f"state-{managed.replace('/', '-')}"
        parent = state / managed
        parent.parent.mkdir(parents=True, exist_ok=True)
        parent.symlink_to(target, target_is_directory=True)
        r = run_main(["job", "--state-dir", state, "--master", "local[1]", "--no-metrics", "--duration", "1"])
        assert r.returncode == 2, r.stderr[-2000:]
        assert "is a link" in r.stderr and str(parent) in r.stderr and "Traceback" not in r.stderr
        assert sorted(str(f.relative_to(target)) for f in target.rglob("*")) == ["a.txt", "b.txt", "sub", "sub/c.txt"]
