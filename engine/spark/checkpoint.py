"""What a job's checkpoint fixes for every later run on it: the shard count.

Symbols are hashed to shards and each shard's state is one row keyed by the shard, so a
restart with another shard count would hand each task the state of other symbols. Spark
records the session's `spark.sql.shuffle.partitions` (which the job sets to the shard
count) in every offset log entry and keeps using it for the stateful stage; this reads it
back so that a restart takes the same count, and refuses a different one given explicitly.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from engine.config import Config
from engine.formats.log import first_retained, read_consumed

log = logging.getLogger(__name__)

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


class ShardMismatch(ValueError):
    """The shard count asked for is not the one the checkpoint was made with."""


def recorded_shards(checkpoint_dir: str | os.PathLike) -> int | None:
    """The shard count of the newest offset log entry, None for a fresh checkpoint."""
    offsets = Path(checkpoint_dir) / "offsets"
    try:
        ids = sorted((int(n) for n in os.listdir(offsets) if n.isdigit()), reverse=True)
    except FileNotFoundError:
        return None
    for batch in ids:
        try:
            lines = (offsets / str(batch)).read_text().splitlines()
            return int(json.loads(lines[1])["conf"][SHUFFLE_PARTITIONS])
        except (OSError, IndexError, KeyError, ValueError):
            continue                 # torn by a crash mid-write: Spark falls back to the one before too
    return None


def settle_shards(cfg: Config, explicit: bool) -> Config:
    """Return `cfg` with the checkpoint's shard count.

    `explicit`: the user gave `--shards` or `MS_SHARDS`; a value that differs from the
    checkpoint's is then an error rather than silently replaced.
    """
    fixed = recorded_shards(cfg.checkpoint_dir)
    if fixed is None or fixed == cfg.shards:
        return cfg
    if explicit:
        raise ShardMismatch(f"the checkpoint in {cfg.checkpoint_dir} was made with --shards {fixed}, "
                            f"not {cfg.shards}: the shard count is fixed per checkpoint (use --shards {fixed}, "
                            f"or a new --state-dir for {cfg.shards})")
    log.info("using the checkpoint's shard count, %d", fixed)
    return replace(cfg, shards=fixed)


def committed_batches(checkpoint_dir: str | os.PathLike) -> list[int]:
    """Ids of the batches the checkpoint's commit log holds (empty for a fresh checkpoint)."""
    try:
        return sorted(int(n) for n in os.listdir(Path(checkpoint_dir) / "commits") if n.isdigit())
    except FileNotFoundError:
        return []


def committed_end_offset(checkpoint_dir: str | os.PathLike) -> int | None:
    """The ingress log offset the newest committed batch ended at, None if unknown.

    A restart plans its next batch (or re-runs an uncommitted one) from exactly this
    offset, so the log below it is never read again (retention deletes it).
    """
    cp = Path(checkpoint_dir)
    try:
        batch = max((int(n) for n in os.listdir(cp / "commits") if n.isdigit()), default=None)
    except FileNotFoundError:
        return None
    if batch is None:
        return None
    try:
        lines = (cp / "offsets" / str(batch)).read_text().splitlines()
        return int(json.loads(lines[2])["seq"])
    except (OSError, IndexError, KeyError, ValueError, TypeError):
        return None


def lost_checkpoint(cfg: Config) -> str | None:
    """Return why the job must not start a fresh query on this state folder, None if it may.

    A checkpoint with no planned batch on a log that a job already committed from (its
    `consumed` offset) was lost: a new query would plan from record 0, which retention
    may have deleted, and number its result batches from 0 again, over the old ones.
    """
    consumed = read_consumed(cfg.log_dir)
    if consumed == 0 or committed_batches(cfg.checkpoint_dir) or _planned(cfg.checkpoint_dir):
        return None
    first = first_retained(cfg.log_dir)
    gone = f", and retention deleted the log before record {first:,}" if first else ""
    return (f"the checkpoint {cfg.checkpoint_dir} holds no batch, but a job on this state folder committed "
            f"{consumed:,} records{gone}: a new query would read the log from record 0 and number its "
            f"result batches from 0 again. Either restore the checkpoint folder (from a backup) and start "
            f"the job again, or start afresh with a new state folder (--state-dir) and send the input "
            f"again; the old results stay in {cfg.out_dir}")


def _planned(checkpoint_dir: Path) -> bool:
    try:
        return any(n.isdigit() for n in os.listdir(checkpoint_dir / "offsets"))
    except FileNotFoundError:
        return False
