"""Re-partitioning the shards' symbol tables: M snapshots -> N, each symbol once, where its hash puts it.

The split is pure; the rescale of a checkpoint folder is tested on real files, cut short at
each of its pause points (as a SIGKILL would leave it) and finished by the next call.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.config import MAX_SHARDS, Config
from engine.formats.batch import batch_dir
from engine.formats.records import shard_of
from engine.rule import ShardState
from engine.spark import shard_state
from engine.spark.checkpoint import hold_checkpoint, recorded_shards, release_checkpoint
from engine.spark.rescale import JOURNAL, PAUSE_POINTS, pending, settle_rescale, split_states
from marketspread.cli import main


def _states(symbols: np.ndarray, n: int, seed: int = 1) -> list[ShardState]:
    """Tables of `n` shards holding `symbols`, each where the hash for `n` puts it, with random values."""
    rng = np.random.default_rng(seed)
    symbols = np.unique(symbols).astype(np.int32)
    reject, bid, offer = rng.random(len(symbols)) < 0.3, rng.random(len(symbols)), rng.random(len(symbols)) + 1
    k = shard_of(symbols, n)
    return [ShardState(symbols[k == s], reject[k == s], bid[k == s], offer[k == s]) for s in range(n)]


def _table(states: list[ShardState]) -> dict[int, tuple[bool, float, float]]:
    return {int(sym): (bool(r), float(b), float(o)) for s in states
            for sym, r, b, o in zip(s.symbols, s.reject, s.bid, s.offer)}


@pytest.mark.parametrize("m, n", [(1, 4), (4, 2), (2, 1), (3, 7), (5, 5)])
def test_split_puts_every_symbol_once_in_the_shard_its_hash_gives(m, n):
    symbols = np.random.default_rng(m * 10 + n).integers(-2**31, 2**31 - 1, 5_000)
    old = _states(symbols, m)
    new = split_states(old, n)
    assert len(new) == n
    assert sum(len(s.symbols) for s in new) == len(np.unique(symbols))
    assert _table(new) == _table(old)                       # nothing lost, nothing changed
    for k, s in enumerate(new):
        assert (shard_of(s.symbols, n) == k).all()
        assert (np.diff(s.symbols) > 0).all()               # sorted, as the rule's lookups need
        assert s.symbols.dtype == np.int32 and s.reject.dtype == bool


def test_split_of_nothing_is_empty_shards_and_a_symbol_in_two_shards_is_refused():
    assert [len(s.symbols) for s in split_states([ShardState.empty()] * 3, 2)] == [0, 0]
    a = _states(np.arange(10), 1)[0]
    with pytest.raises(ValueError, match="in two shards"):
        split_states([a, a], 2)


# --------------------------------------------------------------------------- a checkpoint folder

def _checkpoint(tmp_path: Path, shards: int, committed: int = 3, planned: bool = True) -> Config:
    """A job's checkpoint after `committed` + 1 committed batches with `shards` shards, and batch
    `committed + 1` planned but not committed (its results and snapshots written) if `planned`."""
    cfg = Config.from_env(state_dir=tmp_path / "state", shards=shards)
    cp = cfg.checkpoint_dir
    (cp / "offsets").mkdir(parents=True)
    (cp / "commits").mkdir()
    shard_state.start_fresh(str(cfg.shard_state_dir))
    rng = np.random.default_rng(7)
    last = committed + (1 if planned else 0)
    for b in range(last + 1):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": str(shards)}}
        (cp / "offsets" / str(b)).write_text("v1\n" + json.dumps(meta) + '\n{"seq":%d}' % (100 * (b + 1)))
        if b <= committed:
            (cp / "commits" / str(b)).write_text("v1\n{}")
        # the tables grow batch by batch: a later batch's state differs from an earlier one's
        for s, state in enumerate(_states(rng.integers(0, 400, 40 * (b + 1)), shards, seed=b)):
            shard_state.write_snapshot(cfg.shard_state_dir, s, b, state)
            d = batch_dir(cfg.out_dir, b)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{s}.bin").write_bytes(b"x" * 10)
    return cfg


def _state_at(cfg: Config, batch: int, shards: int) -> list[ShardState]:
    return [shard_state.load(str(cfg.shard_state_dir), s, batch + 1) for s in range(shards)]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _assert_rescaled(cfg: Config, before: dict, n: int, batch: int) -> None:
    assert recorded_shards(cfg.checkpoint_dir) == n
    assert not pending(cfg)
    cp = cfg.checkpoint_dir
    assert sorted(p.name for p in cp.iterdir() if "shard-state" in p.name) == ["shard-state"]
    shards = sorted(int(p.name) for p in cfg.shard_state_dir.iterdir() if p.name.isdigit())
    assert shards == list(range(n))
    for s in shards:                       # one snapshot each: the committed batch's
        assert os.listdir(cfg.shard_state_dir / str(s)) == [f"{batch}.state"]
    new = _state_at(cfg, batch, n)
    assert _table(new) == before
    for k, s in enumerate(new):
        assert (shard_of(s.symbols, n) == k).all()
    # the planned batch's results are gone, the committed ones untouched
    assert not batch_dir(cfg.out_dir, batch + 1).exists()
    assert sorted(os.listdir(batch_dir(cfg.out_dir, batch))) == [f"{s}.bin" for s in range(recorded_old(cfg))]


def recorded_old(cfg: Config) -> int:
    return int(json.loads((cfg.checkpoint_dir / "offsets" / "0").read_text().splitlines()[1])["conf"]
               ["spark.sql.shuffle.partitions"])


def test_a_rescale_takes_the_last_committed_state_and_drops_the_planned_batch(tmp_path):
    cfg = _checkpoint(tmp_path, 3)
    before = _table(_state_at(cfg, 3, 3))
    assert before != _table(_state_at(cfg, 4, 3))          # the uncommitted batch changed the tables
    done = settle_rescale(replace(cfg, shards=5))
    assert [(r.from_shards, r.to_shards, r.batch, r.symbols) for r in done] == [(3, 5, 3, len(before))]
    _assert_rescaled(replace(cfg, shards=5), before, 5, 3)
    assert settle_rescale(replace(cfg, shards=5)) == []     # done: nothing more
    settle_rescale(replace(cfg, shards=1))                  # and on: 5 -> 1
    _assert_rescaled(cfg, before, 1, 3)


def test_a_checkpoint_with_no_committed_batch_rescales_to_empty_tables(tmp_path):
    cfg = _checkpoint(tmp_path, 2, committed=-1)
    (done,) = settle_rescale(replace(cfg, shards=4))
    assert (done.batch, done.symbols) == (-1, 0)
    assert recorded_shards(cfg.checkpoint_dir) == 4
    assert not batch_dir(cfg.out_dir, 0).exists()
    assert all(len(shard_state.load(str(cfg.shard_state_dir), s, 0).symbols) == 0 for s in range(4))


class _Killed(BaseException):
    """Stands for a SIGKILL at a pause point: nothing after it runs."""


@pytest.mark.parametrize("point", PAUSE_POINTS)
@pytest.mark.parametrize("then", [4, 2])
def test_a_rescale_cut_short_anywhere_is_finished_by_the_next_start(tmp_path, point, then):
    cfg = _checkpoint(tmp_path, 2)
    before = _table(_state_at(cfg, 3, 2))

    def kill(at):
        if at == point:
            raise _Killed

    with pytest.raises(_Killed):
        settle_rescale(replace(cfg, shards=4), kill)
    assert pending(cfg)
    done = settle_rescale(replace(cfg, shards=then))       # the same count again, or another
    assert [(r.from_shards, r.to_shards) for r in done] == [(2, 4)] + ([(4, then)] if then != 4 else [])
    _assert_rescaled(cfg, before, then, 3)


def test_the_swap_cut_between_its_renames_finishes(tmp_path):
    cfg = _checkpoint(tmp_path, 3)
    before = _table(_state_at(cfg, 3, 3))

    def kill(at):
        if at == "swapped":
            raise _Killed

    with pytest.raises(_Killed):
        settle_rescale(replace(cfg, shards=2), kill)
    assert not cfg.shard_state_dir.exists()                # between the two renames
    assert recorded_shards(cfg.checkpoint_dir) == 3         # the offset log's, until the swap ends
    settle_rescale(replace(cfg, shards=2))
    _assert_rescaled(cfg, before, 2, 3)


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("shards", ["0", "-1", str(MAX_SHARDS + 1)])
@pytest.mark.parametrize("command", ["job", "rescale"])
def test_a_shard_count_out_of_range_is_one_line_and_touches_nothing(tmp_path, capsys, shards, command):
    cfg = _checkpoint(tmp_path, 2)
    before = _tree(cfg.state_dir)
    assert main([command, "--state-dir", str(cfg.state_dir), "--shards", shards]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"marketspread {command}: error: --shards must be between 1 and {MAX_SHARDS}, not {shards}"
    assert _tree(cfg.state_dir) == before


def test_a_rescale_while_another_process_holds_the_checkpoint_is_refused(tmp_path, capsys):
    cfg = _checkpoint(tmp_path, 2)
    lock = hold_checkpoint(cfg.checkpoint_dir)              # a running job's
    try:
        before = _tree(cfg.state_dir)
        for command, *more in (("rescale",), ("job", "--no-metrics")):
            assert main([command, "--state-dir", str(cfg.state_dir), "--shards", "3", *more]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and f"another process (pid {os.getpid()}) holds the checkpoint" in err[0], err
            assert _tree(cfg.state_dir) == before
    finally:
        release_checkpoint(lock)
    assert main(["rescale", "--state-dir", str(cfg.state_dir), "--shards", "3"]) == 0
    assert "from 2 to 3 shards at batch 3" in capsys.readouterr().out
    assert recorded_shards(cfg.checkpoint_dir) == 3


def test_rescale_needs_shards_and_a_journal_it_cannot_read_is_refused(tmp_path, capsys):
    cfg = _checkpoint(tmp_path, 2)
    assert main(["rescale", "--state-dir", str(cfg.state_dir)]) == 2
    assert "rescale needs --shards" in capsys.readouterr().err
    (cfg.checkpoint_dir / JOURNAL).write_text("{")
    with pytest.raises(ValueError, match="not a rescale journal"):
        settle_rescale(replace(cfg, shards=3))


def test_a_state_it_cannot_read_is_refused_before_anything_changes(tmp_path):
    cfg = _checkpoint(tmp_path, 3)
    for f in (cfg.shard_state_dir / "1").iterdir():         # shard 1's snapshots lost
        f.unlink()
    (cfg.shard_state_dir / shard_state.GENESIS).unlink()
    before = _tree(cfg.state_dir)
    with pytest.raises(shard_state.MissingState, match="no state of shard 1 before batch 4"):
        settle_rescale(replace(cfg, shards=2))
    assert _tree(cfg.state_dir) == before and not pending(cfg)
