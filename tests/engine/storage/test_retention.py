"""Retention: what may be deleted (pure), and scratch folders and process logs kept bounded.

The worker that deletes: tests/marketspread/test_retention_worker.py.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.spark.session import _private_dir, remove_dead_temp
from engine.storage.retention import (BatchFootprint, RetentionPolicy, log_keep_from, parse_duration_s, parse_size_bytes,
                                      results_keep_from, segments_to_delete)
from marketspread.demo import pump_log

S = 1_000_000_000


# --------------------------------------------------------------------------- pure decisions

def test_parses_kafka_style_times_and_sizes_and_off():
    assert parse_duration_s("24h") == 86400 and parse_duration_s("90m") == 5400 and parse_duration_s("30") == 30
    assert parse_duration_s("1.5s") == 1.5 and parse_duration_s("7d") == 7 * 86400
    assert parse_size_bytes("10GiB") == 10 << 30 and parse_size_bytes("500MB") == 500_000_000
    assert parse_size_bytes("4096") == 4096
    for off in ("0", "off", "none"):
        assert parse_duration_s(off) is None and parse_size_bytes(off) is None
    for bad in ("-1h", "1 fortnight", "h"):
        with pytest.raises(ValueError, match="is not a time"):
            parse_duration_s(bad)
    with pytest.raises(ValueError, match="is not a size"):
        parse_size_bytes("12 apples")


def test_log_segments_go_only_below_the_committed_end_and_the_hold_never_the_newest():
    assert log_keep_from(None, None) == 0                       # nothing committed: keep all
    assert log_keep_from(250, None) == 250 and log_keep_from(250, 120) == 120
    firsts = [0, 100, 200, 300]
    assert segments_to_delete(firsts, 100, 250) == [0, 100]
    assert segments_to_delete(firsts, 100, 200) == [0, 100]     # [100, 200) is wholly below 200
    assert segments_to_delete(firsts, 100, 199) == [0]
    assert segments_to_delete(firsts, 100, 10_000) == [0, 100, 200]   # the newest always stays
    assert segments_to_delete([], 100, 10_000) == []


def _fp(batch, nbytes=100, age_s=0.0, now=1000 * S):
    return BatchFootprint(batch, nbytes, int(now - age_s * S))


def test_results_go_oldest_first_by_age_or_size_never_the_newest_committed():
    now = 1000 * S
    by_age = RetentionPolicy(results_age_s=60, results_bytes=None)
    batches = [_fp(0, age_s=300), _fp(1, age_s=120), _fp(3, age_s=30), _fp(4, age_s=1)]
    assert results_keep_from(batches, committed=4, now_ns=now, policy=by_age) == 2   # 2 wrote nothing
    by_size = RetentionPolicy(results_age_s=None, results_bytes=250)
    assert results_keep_from(batches, committed=4, now_ns=now, policy=by_size) == 2  # 400 -> 200 bytes
    tiny = RetentionPolicy(results_age_s=0.001, results_bytes=1)
    assert results_keep_from(batches, committed=4, now_ns=now, policy=tiny) == 4     # 4 is the newest committed
    assert results_keep_from(batches, committed=3, now_ns=now, policy=tiny) == 2     # 3 is the newest committed
    keep_all = RetentionPolicy(results_age_s=None, results_bytes=None)
    assert results_keep_from(batches, committed=4, now_ns=now, policy=keep_all) == 0
    assert results_keep_from(batches[2:], committed=4, now_ns=now, policy=tiny, current=3) == 4


# --------------------------------------------------------------------------- scratch folders, process logs

def test_scratch_folders_of_dead_processes_go_and_live_ones_stay(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"{dead.pid}-12345-abc").mkdir()                     # its process is gone
    (tmp_path / f"{os.getpid()}-1-abc").mkdir()                      # a pid reused by another process
    mine = _private_dir(tmp_path, "")                                # this process: alive
    (tmp_path / "unrelated").mkdir()
    removed = remove_dead_temp(tmp_path, "")
    assert sorted(p.name for p in removed) == sorted([f"{dead.pid}-12345-abc", f"{os.getpid()}-1-abc"])
    assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(mine), "unrelated"])


def test_a_childs_output_is_rotated_and_bounded(tmp_path):
    path = tmp_path / "child.log"
    script = "for i in range(20000): print(f'line {i:06d} ' + 'x' * 80)"
    child = subprocess.Popen([sys.executable, "-c", script],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pump = pump_log(child.stdout, path, max_bytes=200_000, backups=3)
    assert child.wait(timeout=60) == 0
    pump.join(timeout=60)
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["child.log", "child.log.1", "child.log.2", "child.log.3"]
    assert all(f.stat().st_size <= 200_000 for f in files)
    assert path.read_text().splitlines()[-1].startswith("line 019999 ")          # the newest lines are kept
