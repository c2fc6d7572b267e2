"""perf/e2e.py's CommitWatcher: batch commit times, end offsets and durations from a checkpoint's logs."""
from __future__ import annotations

import json
import os

from perf import e2e


def _batch(cp, batch: int, planned_ns: int, committed_ns: int, end_seq: int) -> None:
    (cp / "offsets").mkdir(parents=True, exist_ok=True)
    (cp / "commits").mkdir(parents=True, exist_ok=True)
    offsets = cp / "offsets" / str(batch)
    offsets.write_text("v1\n{}\n" + json.dumps({"seq": end_seq}) + "\n")
    os.utime(offsets, ns=(planned_ns, planned_ns))
    commit = cp / "commits" / str(batch)
    commit.write_text("v1\n{}\n")
    os.utime(commit, ns=(committed_ns, committed_ns))


def test_durations_run_from_the_offset_log_to_the_commit_log(tmp_path):
    cp = tmp_path / "checkpoint"
    s = 1_000_000_000
    _batch(cp, 0, 10 * s, 10 * s + 400_000_000, 100)
    _batch(cp, 1, 11 * s, 11 * s + 250_000_000, 250)
    _batch(cp, 2, 12 * s, 13 * s + 500_000_000, 400)
    e2e.CommitWatcher(tmp_path).start().stop()
    assert e2e.batch_end_offsets(tmp_path) == {0: 100, 1: 250, 2: 400}
    assert e2e.batch_durations_ms(tmp_path, 11 * s, 14 * s).tolist() == [250.0, 1500.0]   # committed in the window
    (tmp_path / "batches.json").write_text(json.dumps({"0": [10 * s, 100]}))           # an older file: no durations
    assert e2e.batch_durations_ms(tmp_path, 0, 20 * s).size == 0 and e2e.batch_end_offsets(tmp_path) == {0: 100}
