"""Re-partition the shards' symbol tables to another shard count, from the last committed batch.

Each shard's snapshots hold the symbols `shard_of(symbol, n)` gives it (shard_state.py), so
`marketspread job --shards N` on a checkpoint made with M shards first rewrites them: the
tables as of the last committed batch B, split again by the hash for N, one snapshot
`<shard>/<B>.state` per new shard. Spark then plans batch B + 1 (or runs again the one it
had planned) as N rows, and each task starts from its new table. A batch planned but not
committed left results and snapshots of M shards behind: its result folders are removed
first (readers see only committed batches, engine/formats/batch.py, so nothing they read
is touched), and its snapshots go with the old folder.

Restartable at any point, as a crash may stop it anywhere: a journal
(`<checkpoint>/rescale.json`: from, to, batch) is written first and removed last, every
step between is idempotent, and whoever takes the checkpoint next finishes a journal's
rescale before anything else. The new tables are built in `shard-state.next/`, whose
count file (`SHARDS`, checkpoint.py) is written last and so marks it whole; two renames
swap it in (the old folder to `shard-state.prev/`), and the count file inside the folder
becomes the checkpoint's count with the same rename that brings the new tables.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

import numpy as np

from collector.safe_delete import remove_in, remove_tree

from engine.config import Config
from engine.formats.batch import BATCHES, batch_dir, fsync_dir
from engine.formats.records import shard_of
from engine.rule import ShardState
from engine.spark import shard_state
from engine.spark.checkpoint import SHARDS_FILE, check_shards, committed_batches, recorded_shards, state_shards

log = logging.getLogger(__name__)

JOURNAL = "rescale.json"
PAUSE_POINTS = ("journal", "built", "swapped")     # where a test may stop a rescale (`pause`)


class Rescale(NamedTuple):
    """One re-partition done: from and to how many shards, at which committed batch (-1: none yet)."""
    from_shards: int
    to_shards: int
    batch: int
    symbols: int
    seconds: float
    ended_ns: int                  # wall clock, for the point that marks it


class _Journal(NamedTuple):
    from_shards: int
    to_shards: int
    batch: int


def split_states(states: Iterable[ShardState], n_shards: int) -> list[ShardState]:
    """Re-partition shards' tables into `n_shards` tables: each symbol once, in the shard its hash gives.

    Raises ValueError when a symbol is in two of the tables (they are not one checkpoint's).
    """
    states = list(states)
    symbols = np.concatenate([s.symbols for s in states] or [np.empty(0, np.int32)]).astype(np.int32)
    reject = np.concatenate([s.reject for s in states] or [np.empty(0, bool)]).astype(bool)
    bid = np.concatenate([s.bid for s in states] or [np.empty(0)]).astype(np.float64)
    offer = np.concatenate([s.offer for s in states] or [np.empty(0)]).astype(np.float64)
    order = np.argsort(symbols, kind="stable")
    symbols, reject, bid, offer = symbols[order], reject[order], bid[order], offer[order]
    if len(symbols) > 1 and (twice := symbols[1:][symbols[1:] == symbols[:-1]]).size:
        raise ValueError(f"symbol {int(twice[0])} is in two shards' state: not one checkpoint's")
    target = shard_of(symbols, n_shards)
    return [ShardState(symbols[m], reject[m], bid[m], offer[m]) for m in (target == k for k in range(n_shards))]


def pending(cfg: Config) -> bool:
    """Whether a rescale was cut short on this checkpoint (the next job finishes it)."""
    return (cfg.checkpoint_dir / JOURNAL).exists()


def settle_rescale(cfg: Config, pause: Callable[[str], None] | None = None) -> list[Rescale]:
    """Bring the checkpoint's shard state to `cfg.shards`; return the re-partitions done (none: it was).

    Finishes a rescale a crash cut short first. The caller holds the checkpoint
    (`hold_checkpoint`). `pause(point)`, if given, is called at each of `PAUSE_POINTS`
    (a test stops the process there).
    """
    check_shards(cfg.shards)
    done = []
    journal = _read_journal(cfg.checkpoint_dir)
    if journal is not None:
        log.info("finishing the rescale from %d to %d shards a stop cut short", journal.from_shards,
                 journal.to_shards)
        done.append(_run(cfg, journal, pause))
    current = recorded_shards(cfg.checkpoint_dir)
    if current is not None and current != cfg.shards:
        batch = max(committed_batches(cfg.checkpoint_dir), default=-1)
        journal = _Journal(current, cfg.shards, batch)
        # Read and split once before anything changes: a state it cannot read or split (a
        # missing or foreign snapshot) is refused with the checkpoint as it was.
        split_states(_old_states(cfg.shard_state_dir, journal), journal.to_shards)
        _write_durably(cfg.checkpoint_dir / JOURNAL, json.dumps(journal._asdict()))
        done.append(_run(cfg, journal, pause))
    return done


def _run(cfg: Config, j: _Journal, pause: Callable[[str], None] | None) -> Rescale:
    t0 = time.monotonic()
    pause = pause or (lambda point: None)
    pause("journal")
    _drop_uncommitted(cfg.out_dir, j.batch)
    cur = cfg.shard_state_dir
    nxt, prev = cur.with_name(cur.name + ".next"), cur.with_name(cur.name + ".prev")
    if state_shards(cur) != j.to_shards:          # else swapped in already
        if cur.exists():
            if state_shards(nxt) != j.to_shards:  # not whole: built again
                remove_tree(nxt)
                _build(cur, nxt, j)
            pause("built")
            remove_tree(prev)
            cur.rename(prev)
            fsync_dir(cur.parent)
            pause("swapped")
        nxt.rename(cur)                           # cut short between the two renames: the second
        fsync_dir(cur.parent)
    remove_tree(prev)
    remove_in(cfg.checkpoint_dir, cfg.checkpoint_dir / JOURNAL)
    fsync_dir(cfg.checkpoint_dir)
    size = shard_state.state_size(cur)
    r = Rescale(j.from_shards, j.to_shards, j.batch, size[0] if size else 0, time.monotonic() - t0,
                time.time_ns())
    log.info("rescaled the checkpoint from %d to %d shards at batch %d: %d symbols in %.2f s",
             r.from_shards, r.to_shards, r.batch, r.symbols, r.seconds)
    return r


def _drop_uncommitted(out_dir: Path, batch: int) -> None:
    """Remove the result folders of batches after `batch`, the last committed one (none is read)."""
    try:
        names = os.listdir(Path(out_dir) / BATCHES)
    except FileNotFoundError:
        return
    for b in sorted(int(n) for n in names if n.isdigit() and int(n) > batch):
        log.info("removing the results of batch %d, written by the old shards but never committed", b)
        remove_tree(batch_dir(out_dir, b))


def _build(cur: Path, nxt: Path, j: _Journal) -> None:
    """Write the new tables as of batch `j.batch` into `nxt`, its count file last."""
    old = _old_states(cur, j)
    nxt.mkdir(parents=True)
    if (cur / shard_state.GENESIS).exists():      # a query with no committed batch yet starts empty
        (nxt / shard_state.GENESIS).touch()
    if j.batch >= 0:
        for shard, state in enumerate(split_states(old, j.to_shards)):
            shard_state.write_snapshot(nxt, shard, j.batch, state)
    fsync_dir(nxt)
    _write_durably(nxt / SHARDS_FILE, f"{j.to_shards}\n")


def _old_states(cur: Path, j: _Journal) -> list[ShardState]:
    """Each old shard's newest snapshot up to the journal's batch (none before the first commit)."""
    if j.batch < 0:
        return []
    return [shard_state.load(str(cur), shard, j.batch + 1) for shard in range(j.from_shards)]


def _read_journal(checkpoint_dir: Path) -> _Journal | None:
    try:
        d = json.loads((checkpoint_dir / JOURNAL).read_text())
        return _Journal(int(d["from_shards"]), int(d["to_shards"]), int(d["batch"]))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):     # written whole by a rename: not the job's
        raise ValueError(f"{checkpoint_dir / JOURNAL} is not a rescale journal this job wrote; "
                         "restore the checkpoint folder from a backup") from None


def _write_durably(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_dir(path.parent)
