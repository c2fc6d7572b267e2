"""Each shard's symbol table, kept by its task in versioned per-batch snapshots.

Spark's state store loaded, diffed and committed the shard's one state row in every
batch, through a shuffle and a sort to group it with its input (docs/PERFORMANCE.md,
"Design decisions": "The symbol table kept in the task instead of Spark's state store"). Here the task keeps its shard's `ShardState` in
the worker's memory between batches and writes it after each batch as
`<folder>/<shard>/<batch>.state` (temp file, fsync, rename). A batch starts from the
newest snapshot of an earlier batch: from memory when this worker wrote it, else from
its file. A batch Spark runs again after a crash (the same offsets, from its offset log)
reads the same snapshot and writes the same one: the results stay effectively once.
"""
from __future__ import annotations

import os
import struct
import time
from pathlib import Path

from collector.safe_delete import LinkOnPath, link_free, remove_in

from engine.rule import ShardState
from engine.formats.batch import fsync_dir

_MAGIC = b"MSST1\n"
_HEAD = struct.Struct("<6sQ")         # magic, symbols
_CACHE: dict[tuple[str, int], tuple[int, ShardState]] = {}   # (folder, shard) -> (batch, state after it)


class MissingState(RuntimeError):
    """The snapshot a batch needs is not there (a checkpoint of another version, or damaged)."""


def _path(folder: str | os.PathLike, shard: int, batch: int) -> Path:
    return Path(folder) / str(shard) / f"{batch}.state"


def encode(state: ShardState) -> bytes:
    """A snapshot's bytes: header, then the four arrays."""
    return b"".join((_HEAD.pack(_MAGIC, len(state.symbols)), *state.to_bytes()))


def decode(raw: bytes) -> ShardState:
    """Read a snapshot; raise ValueError when it is not a whole one."""
    if len(raw) < _HEAD.size:
        raise ValueError("not a whole shard state snapshot")
    magic, n = _HEAD.unpack_from(raw)
    if magic != _MAGIC or len(raw) != _HEAD.size + n * (4 + 1 + 8 + 8):
        raise ValueError("not a whole shard state snapshot")
    o = _HEAD.size
    parts = []
    for width in (4, 1, 8, 8):
        parts.append(raw[o:o + n * width])
        o += n * width
    return ShardState.from_bytes(*parts)


GENESIS = "GENESIS"


def start_fresh(folder: str) -> None:
    """Mark `folder` as the state of a query that starts with no committed batch (driver side)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / GENESIS).touch()
    fsync_dir(Path(folder))


def _snapshots(folder: str, shard: int) -> list[int]:
    try:
        names = os.listdir(Path(folder) / str(shard))
    except FileNotFoundError:
        return []
    return [int(n[:-6]) for n in names if n.endswith(".state") and n[:-6].isdigit()]


def load(folder: str, shard: int, batch: int) -> ShardState:
    """The shard's state before `batch`: its newest snapshot of an earlier batch.

    A batch whose log range was empty ran no task and left no snapshot (Spark's batch 0 of a
    new query is one), so "the batch before" is the newest earlier snapshot, not batch - 1.
    With none, the state is empty only in a folder marked by `start_fresh`.
    """
    cached = _CACHE.get((folder, shard))
    if cached is not None and cached[0] == batch - 1:
        return cached[1]
    earlier = [b for b in _snapshots(folder, shard) if b < batch]
    if not earlier:
        if (Path(folder) / GENESIS).exists():
            return ShardState.empty()
        raise MissingState(f"no state of shard {shard} before batch {batch} in {folder}: the checkpoint was "
                           "made by another version of the job, or its state folder was removed")
    prev = max(earlier)
    if cached is not None and cached[0] == prev:
        return cached[1]
    path = _path(folder, shard, prev)
    try:
        return decode(path.read_bytes())
    except (OSError, ValueError) as e:
        raise MissingState(f"{path}: {e}") from None


def save(folder: str, shard: int, batch: int, state: ShardState, retain: int) -> None:
    """Write the state after `batch` and keep it in memory; remove the snapshot `retain` batches older.

    A worker's first save of a shard sweeps older leftovers too (another worker's, or a
    temp file of a process that died mid-write): the folder holds at most `retain` + 1.
    """
    first = (folder, shard) not in _CACHE
    write_snapshot(folder, shard, batch, state)
    _CACHE[(folder, shard)] = (batch, state)
    if first:
        sweep(folder, shard, batch, retain)
    elif batch >= retain:
        try:
            remove_in(folder, _path(folder, shard, batch - retain))
        except LinkOnPath:
            pass                         # a linked shard folder: never delete through it, never fail the batch


def write_snapshot(folder: str | os.PathLike, shard: int, batch: int, state: ShardState) -> None:
    """Write the state after `batch` durably (temp file, fsync, rename, fsync the folder)."""
    path = _path(folder, shard, batch)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:                                 # no mkdir per batch: even a failing one locks the parent
        f = open(tmp, "wb")
    except FileNotFoundError:            # the shard's first snapshot
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(tmp, "wb")
    # Durable before the task ends, as the batch's results are (engine/formats/batch.py): a commit
    # that survives a power cut must find the snapshot it followed, not an older one.
    try:
        with f:
            f.write(encode(state))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:                # a full disk: no temp file left for nobody to remove
        try:
            remove_in(folder, tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def sweep(folder: str, shard: int, batch: int, retain: int) -> int:
    """Remove snapshots more than `retain` batches older than `batch` and stray temp files; return how many."""
    removed = 0
    if not link_free(folder, Path(folder) / str(shard)):
        return 0                         # a linked shard folder leads outside: nothing there is ours
    try:
        entries = list(os.scandir(Path(folder) / str(shard)))
    except FileNotFoundError:
        return 0
    for e in entries:
        name = e.name
        # A temp file of a process that died mid-write (a minute old: not a live writer's).
        stale = name.startswith(".") and name.endswith(".tmp") and e.stat(follow_symlinks=False).st_mtime < time.time() - 60
        if name.endswith(".state") and name[:-6].isdigit():
            stale = int(name[:-6]) <= batch - retain
        if stale:
            remove_in(folder, e.path)
            removed += 1
    return removed


def state_size(folder: str | os.PathLike) -> tuple[int, int] | None:
    """(symbols, bytes) of every shard's newest snapshot, None when there is none yet."""
    rows = nbytes = 0
    found = False
    try:
        shards = [e.path for e in os.scandir(folder) if e.is_dir() and e.name.isdigit()]
    except FileNotFoundError:
        return None
    for d in shards:
        batches = [int(n[:-6]) for n in os.listdir(d) if n.endswith(".state") and n[:-6].isdigit()]
        if not batches:
            continue
        path = Path(d) / f"{max(batches)}.state"
        try:
            with open(path, "rb") as f:
                magic, n = _HEAD.unpack(f.read(_HEAD.size))
            size = path.stat().st_size
        except (OSError, struct.error):
            continue                 # removed by retention meanwhile: the next batch reports it
        if magic == _MAGIC:
            rows, nbytes, found = rows + n, nbytes + size, True
    return (rows, nbytes) if found else None
