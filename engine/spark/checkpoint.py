"""What a job's checkpoint fixes for the next run on it: the shard count, and who runs on it.

Symbols are hashed to shards and each shard's symbol table is its task's, so a restart
must know the count the tables were made for. Spark records the session's
`spark.sql.shuffle.partitions` (which the job sets to the shard count) in every offset log
entry, and restores it on restart, so after a rescale (engine/spark/rescale.py) the log
keeps the old count: the shard-state folder's own count file (`SHARDS`), written with
the re-partitioned tables, is then authoritative. One job at a time holds the checkpoint
(`hold_checkpoint`): a rescale rewrites state a running job would read.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from engine.config import MAX_SHARDS, SHARD_STATE, Config
from engine.formats.log import first_retained, read_consumed

log = logging.getLogger(__name__)

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


SHARDS_FILE = "SHARDS"                  # in the shard-state folder: its count, once rescaled
LOCK_FILE = "job.lock"


class CheckpointBusy(RuntimeError):
    """Another process (a job, a rescale) holds the checkpoint."""


def check_shards(shards: int) -> int:
    """Return `shards` if it is a shard count the job can run with; raise ValueError otherwise."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"--shards must be between 1 and {MAX_SHARDS}, not {shards}")
    return shards


def state_shards(shard_state_dir: str | os.PathLike) -> int | None:
    """The shard count a shard-state folder's count file names, None without one."""
    try:
        return int((Path(shard_state_dir) / SHARDS_FILE).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def recorded_shards(checkpoint_dir: str | os.PathLike) -> int | None:
    """The checkpoint's shard count (its state's count file, else the newest offset log
    entry's), None for a fresh checkpoint."""
    rescaled = state_shards(Path(checkpoint_dir) / SHARD_STATE)
    if rescaled is not None:
        return rescaled
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
    """Return `cfg` with the shard count to run with.

    `explicit`: the user gave `--shards` or `MS_SHARDS`, which wins (the job re-partitions
    the checkpoint's state to it, engine/spark/rescale.py); otherwise the checkpoint's count.
    """
    check_shards(cfg.shards)
    fixed = recorded_shards(cfg.checkpoint_dir)
    if fixed is None or fixed == cfg.shards:
        return cfg
    if explicit:
        log.info("the checkpoint was made with %d shards; re-partitioning it to %d", fixed, cfg.shards)
        return cfg
    log.info("using the checkpoint's shard count, %d", fixed)
    return replace(cfg, shards=fixed)


def hold_checkpoint(checkpoint_dir: str | os.PathLike) -> int:
    """Lock the checkpoint for this process (until `release_checkpoint` or its exit); return the lock.

    Raises CheckpointBusy, naming the holder's pid, when another process holds it. An
    advisory lock (flock): the kernel drops it when its holder dies, even by SIGKILL.
    """
    path = Path(checkpoint_dir) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise CheckpointBusy(f"another process (pid {holder}) holds the checkpoint {checkpoint_dir}: "
                             "stop that job first") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release_checkpoint(lock: int) -> None:
    """Let another process run on the checkpoint."""
    os.close(lock)


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
