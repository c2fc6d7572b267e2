"""Each shard's versioned state snapshots: the state before a batch, after crashes and re-runs."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from engine.rule import ShardState
from engine.spark import shard_state


def _state(n: int, seed: int = 0) -> ShardState:
    rng = np.random.default_rng(seed)
    return ShardState(np.sort(rng.choice(1 << 30, n, replace=False)).astype(np.int32), rng.random(n) < 0.5,
                      rng.random(n), rng.random(n))


def _equal(a: ShardState, b: ShardState) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a.to_bytes(), b.to_bytes()))


@pytest.fixture(autouse=True)
def _no_cache():
    """Each test starts as a fresh worker would: nothing in memory."""
    shard_state._CACHE.clear()
    yield
    shard_state._CACHE.clear()


def test_snapshot_round_trip():
    s = _state(2000)
    assert _equal(shard_state.decode(shard_state.encode(s)), s)
    assert _equal(shard_state.decode(shard_state.encode(ShardState.empty())), ShardState.empty())


def test_a_torn_snapshot_is_refused():
    raw = shard_state.encode(_state(10))
    for bad in (raw[:-1], raw + b"x", b"nonsense" * 4):
        with pytest.raises(ValueError):
            shard_state.decode(bad)


def test_fresh_state_is_empty_only_where_marked(tmp_path):
    folder = str(tmp_path / "st")
    with pytest.raises(shard_state.MissingState, match="another version|removed"):
        shard_state.load(folder, 0, 3)
    shard_state.start_fresh(folder)
    assert _equal(shard_state.load(folder, 0, 3), ShardState.empty())


def test_the_newest_earlier_snapshot_is_the_state_before_a_batch(tmp_path):
    """Spark's batch 0 of a new query has an empty range and runs no task: batch 1 starts empty."""
    folder = str(tmp_path / "st")
    shard_state.start_fresh(folder)
    s1, s2 = _state(5, 1), _state(7, 2)
    shard_state.save(folder, 0, 1, s1, retain=100)
    shard_state.save(folder, 0, 2, s2, retain=100)
    shard_state._CACHE.clear()                                  # another worker
    assert _equal(shard_state.load(folder, 0, 2), s1)           # a re-run of batch 2 reads batch 1's
    assert _equal(shard_state.load(folder, 0, 3), s2)
    assert _equal(shard_state.load(folder, 0, 9), s2)           # batches without this shard's rows
    assert _equal(shard_state.load(folder, 1, 3), ShardState.empty())   # another shard, fresh folder


def test_a_rerun_after_a_crash_reads_the_state_before_it_not_its_own_first_attempt(tmp_path):
    folder = str(tmp_path / "st")
    shard_state.start_fresh(folder)
    before, first_try = _state(4, 3), _state(4, 4)
    shard_state.save(folder, 0, 5, before, retain=100)
    shard_state.save(folder, 0, 6, first_try, retain=100)      # written, then the process died uncommitted
    assert _equal(shard_state.load(folder, 0, 6), before)     # from memory: the cache holds 6, not 5
    shard_state._CACHE.clear()
    assert _equal(shard_state.load(folder, 0, 6), before)     # from the file


def test_without_the_marker_a_missing_history_is_an_error(tmp_path):
    folder = tmp_path / "st"
    shard_state.save(str(folder), 0, 4, _state(3), retain=100)
    shard_state._CACHE.clear()
    assert shard_state.load(str(folder), 0, 5) is not None
    with pytest.raises(shard_state.MissingState):
        shard_state.load(str(folder), 0, 4)                    # nothing before 4, and no GENESIS
    (folder / "0" / "4.state").write_bytes(b"torn")
    with pytest.raises(shard_state.MissingState, match="not a whole"):
        shard_state.load(str(folder), 0, 5)


def test_retention_keeps_the_last_batches(tmp_path):
    folder = str(tmp_path / "st")
    shard_state.start_fresh(folder)
    for b in range(1, 31):
        shard_state.save(folder, 0, b, _state(3, b), retain=10)
    kept = sorted(int(p.stem) for p in (tmp_path / "st" / "0").glob("*.state"))
    assert kept == list(range(21, 31))
    dead = tmp_path / "st" / "0" / ".7.state.123.tmp"                  # a writer died mid-write
    dead.write_bytes(b"x")
    os.utime(dead, (time.time() - 120, time.time() - 120))
    (tmp_path / "st" / "0" / ".8.state.456.tmp").write_bytes(b"x")      # a live writer's: kept
    (tmp_path / "st" / "0" / "3.state").write_bytes(b"x")               # left by another retention
    assert shard_state.sweep(folder, 0, 30, retain=10) == 2
    assert sorted(p.name for p in (tmp_path / "st" / "0").iterdir()) == sorted(
        [".8.state.456.tmp"] + [f"{b}.state" for b in range(21, 31)])


def test_state_size_is_the_newest_snapshot_of_each_shard(tmp_path):
    folder = str(tmp_path / "st")
    assert shard_state.state_size(folder) is None
    shard_state.start_fresh(folder)
    assert shard_state.state_size(folder) is None
    shard_state.save(folder, 0, 1, _state(10, 1), retain=100)
    shard_state.save(folder, 0, 2, _state(12, 2), retain=100)
    shard_state.save(folder, 1, 2, _state(5, 3), retain=100)
    rows, nbytes = shard_state.state_size(folder)
    assert rows == 17
    assert nbytes == len(shard_state.encode(_state(12, 2))) + len(shard_state.encode(_state(5, 3)))


def test_a_worker_that_saved_before_makes_a_removed_folder_again(tmp_path):
    """Saves skip the per-batch mkdir; a shard folder removed under a live worker is made again."""
    import shutil
    folder = str(tmp_path / "state")
    shard_state.save(folder, 0, 1, _state(3), retain=100)
    shutil.rmtree(folder)
    shard_state.save(folder, 0, 2, _state(4, 2), retain=100)
    shard_state._CACHE.clear()
    assert _equal(shard_state.load(folder, 0, 3), _state(4, 2))
