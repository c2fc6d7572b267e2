"""The task-sample spool: round trip, newest attempt wins, the bound, sweep, hostile files."""
from __future__ import annotations

import os
import time

import numpy as np

from collector import task_spool as ts
from collector.samples import record_step


def _sample(step: str, values, worker: str = "h/p0", ts_ns: int | None = None):
    return record_step(step, "", worker, np.asarray(values, np.int64), time.time_ns() if ts_ns is None else ts_ns)


def _task(stage=1, partition=0, tid=1, attempt=0, run="job-a", batch=3, query="q1"):
    return ts.TaskAttempt(query, batch, run, stage, partition, tid, attempt)


def test_round_trip_keeps_samples_and_uncounted_rows(tmp_path):
    a, b = _sample("arrival", [1_000, 2_000, 3_000]), _sample("enrich", [5_000_000], "h/p1")
    ts.write_task_samples(tmp_path, _task(), [a], [ts.Uncounted("arrival", nulls=2, negative=1)])
    ts.write_task_samples(tmp_path, _task(), [b])          # a second wrapper in the same task appends
    got = ts.collect_batch_figures(tmp_path, "q1", 3)
    assert [(s.step, s.worker, s.counts) for s in got.samples] == [
        ("arrival", "h/p0", a.counts), ("enrich", "h/p1", b.counts)]
    assert got.uncounted["arrival"] == ts.Uncounted("arrival", 2, 1)
    assert got.unreadable == 0 and got.superseded_files == 0
    assert not (tmp_path / "q1" / "3").exists()              # removed: shipped once
    assert ts.collect_batch(tmp_path, "q1", 3) == []


def test_newest_task_attempt_of_each_partition_wins(tmp_path):
    ts.write_task_samples(tmp_path, _task(partition=0, tid=1), [_sample("s", [1] * 5)])   # failed half-way
    ts.write_task_samples(tmp_path, _task(partition=0, tid=7, attempt=1), [_sample("s", [1] * 9)])
    ts.write_task_samples(tmp_path, _task(partition=1, tid=2), [_sample("s", [1] * 4)])
    ts.write_task_samples(tmp_path, _task(stage=2, partition=0, tid=3), [_sample("t", [1] * 2)])
    got = ts.collect_batch_figures(tmp_path, "q1", 3)
    totals = sorted((s.step, s.counts.total) for s in got.samples)
    assert totals == [("s", 4), ("s", 9), ("t", 2)] and got.superseded_files == 1


def test_a_rerun_after_restart_replaces_the_dead_runs_files(tmp_path):
    old = ts.write_task_samples(tmp_path, _task(run="run-old", tid=40), [_sample("s", [1] * 5)])
    past = time.time() - 60
    os.utime(old, (past, past))
    ts.write_task_samples(tmp_path, _task(run="run-new", tid=1), [_sample("s", [1] * 3)])
    assert [s.counts.total for s in ts.collect_batch(tmp_path, "q1", 3)] == [3]


def test_a_query_folder_past_the_bound_is_not_written_and_the_skip_is_counted(tmp_path):
    for b in range(5):
        assert ts.write_task_samples(tmp_path, _task(batch=b), [_sample("s", [1])], max_batches=5)
    assert ts.write_task_samples(tmp_path, _task(batch=99), [_sample("s", [1])], max_batches=5) is None
    assert ts.write_task_samples(tmp_path, _task(batch=4), [_sample("s", [2])], max_batches=5)  # existing folder
    assert not (tmp_path / "q1" / "99").exists() and ts.skipped_writes(tmp_path) == 1


def test_sweep_removes_what_was_never_collected(tmp_path):
    ts.write_task_samples(tmp_path, _task(batch=1), [_sample("s", [1])])
    ts.write_task_samples(tmp_path, _task(batch=2), [_sample("s", [1])])
    ts.write_task_samples(tmp_path, _task(batch=None, query=None), [_sample("s", [1])])
    past = time.time() - 7200
    os.utime(tmp_path / "q1" / "1", (past, past))
    assert ts.sweep(tmp_path, 3600) == 1
    assert not (tmp_path / "q1" / "1").exists() and (tmp_path / "q1" / "2").is_dir()
    assert ts.sweep(tmp_path, 0, now=time.time() + 10) == 2      # batch 2 and the unbatched file
    assert not (tmp_path / "q1").exists()


def test_unbatched_samples_are_shipped_on_sight(tmp_path):
    task = _task(batch=None, query=None)
    ts.write_task_samples(tmp_path, task, [_sample("s", [1, 2])])
    ts.write_task_samples(tmp_path, task, [_sample("s", [3])])  # same task, second file: no torn reads
    got = ts.collect_unbatched(tmp_path)
    assert list(got) == [task.run]                              # counted under the task's own run
    assert sorted(s.counts.total for s in got[task.run].samples) == [1, 2]
    assert ts.collect_unbatched(tmp_path) == {}


def test_hostile_and_corrupt_files_are_skipped_and_counted(tmp_path):
    good = _sample("s", [10, 20, 30])
    path = ts.write_task_samples(tmp_path, _task(), [good])
    with open(path, "ab") as f:                 # a torn line, garbage, a wrong-typed object
        f.write(b'["", "s", "h/p0", 1, "AAAA\n\x00\xff\xfe\n{"step": "s", "nulls": "x"}\n[1,2]\n')
    folder = tmp_path / "q1" / "3"
    (folder / "not-ours.txt").write_text("hello")
    (folder / "evil~x~y~z~0.s1").write_bytes(os.urandom(64))           # unparseable name
    (folder / "job-a~2~0~5~0.s1").write_bytes(b"\x00" * 32 + b"\n[[[[")   # parseable name, garbage inside
    (folder / "sub").mkdir()
    got = ts.collect_batch_figures(tmp_path, "q1", 3)
    assert [s.counts for s in got.samples if s.step == "s"] == [good.counts]
    assert got.unreadable >= 6
    assert not folder.exists()


def test_samples_dated_far_from_this_clock_are_skipped_and_counted(tmp_path):
    """A writer of a shared spool cannot date points years away (each day a new InfluxDB shard)."""
    now = time.time_ns()
    good = _sample("s", [10])
    ahead, old = _sample("s", [20], ts_ns=now + 86400 * 10**9), _sample("s", [30], ts_ns=now - 30 * 86400 * 10**9)
    ts.write_task_samples(tmp_path, _task(), [good, ahead, old])
    ts.write_task_samples(tmp_path, _task(partition=1), [ahead])
    got = ts.collect_batch_figures(tmp_path, "q1", 3)
    assert [s.counts for s in got.samples] == [good.counts]
    assert all(now - 60 * 10**9 < s.ts_ns < now + 60 * 10**9 for s in got.samples)
    assert got.unreadable == 3


def test_a_missing_or_unreadable_spool_gives_nothing(tmp_path):
    assert ts.collect_batch(tmp_path / "nowhere", "q1", 0) == []
    assert ts.sweep(tmp_path / "nowhere", 0) == 0
    assert ts.collect_unbatched(tmp_path / "nowhere") == {}
    blocked = tmp_path / "file"
    blocked.write_text("x")                      # the spool path is a file: writes skip, counted
    assert ts.write_task_samples(blocked, _task(), [_sample("s", [1])]) is None


def test_default_spool_dir_is_under_the_state_dir(tmp_path):
    assert ts.default_spool_dir({"MS_STATE_DIR": str(tmp_path)}) == tmp_path / "task-samples"
