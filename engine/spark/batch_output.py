"""A shard's output of one micro-batch, written by the stateful task itself.

The state task encodes its rejected orders as Wallaroo OrderResult frames and writes
them, with a `.seq` sidecar (seq, ingest ns per result), its latency samples (`.metrics`)
and how long each step kept it busy (also `.metrics`), under `<out>/batches/<batchId>/<shard>.*`, fsync'd before the task ends. The names depend
only on the batch id and the shard, and a batch's input and starting state are fixed by
Spark's checkpoint, so a batch that Spark runs again after a crash rewrites the same
files with the same records. A batch becomes visible when Spark commits it
(`results.committed_batch`): no sink stage and no driver-side commit of our own, which
measured ~200 ms per micro-batch with a Python data sink.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

BATCHES = "batches"


def batch_dir(out_dir: str | os.PathLike, batch: int) -> Path:
    """Folder of one batch's shard outputs."""
    return Path(out_dir) / BATCHES / f"{batch:012d}"


def _write_durable(path: Path, data: bytes) -> None:
    # Written in place: readers look at a batch only once Spark has committed it, and a
    # rerun of an uncommitted batch truncates and rewrites the same file.
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (a new or renamed file's name) survive a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _shard_dir(out_dir: str | os.PathLike, batch: int) -> Path:
    d = batch_dir(out_dir, batch)
    try:
        d.mkdir(parents=True)
        fsync_dir(d.parent)             # the new folder's name must survive a power cut
    except FileExistsError:
        pass                             # the other shard's task, or a rerun of the batch
    return d


def write_shard_results(out_dir: str | os.PathLike, batch: int, shard: int, frames: bytes,
                        seqs: bytes) -> None:
    """Write one shard's results of `batch`: OrderResult `frames` and their `seqs` sidecar."""
    if not frames:
        return
    d = _shard_dir(out_dir, batch)
    _write_durable(d / f"{shard}.seq", seqs)
    _write_durable(d / f"{shard}.bin", frames)
    fsync_dir(d)


def write_shard_metrics(out_dir: str | os.PathLike, batch: int, shard: int, samples: bytes,
                        busy: bytes) -> None:
    """Write one shard's step `busy` times and latency `samples` of `batch` (collector formats).

    One file, not fsync'd: an fsync per task costs milliseconds to tens of milliseconds
    while the ingress fsyncs its log, on the batch's critical path, and these are figures,
    not results. A SIGKILL loses nothing (the page cache keeps the file); after a power
    cut a committed batch may lack its figures or have a torn file, which the reader
    skips (`read_shard_metrics`). No `mkdir` when the folder is there: even a failing one
    locks the batches' folder, which the next batch's task and the readers also use.
    """
    name = f"{shard}.metrics"
    try:                                 # the batch's folder exists when it has results
        f = open(batch_dir(out_dir, batch) / name, "wb")
    except FileNotFoundError:
        f = open(_shard_dir(out_dir, batch) / name, "wb")
    with f:
        f.write(busy + b"\n" + samples)


def read_shard_metrics(path: Path) -> tuple[bytes, bytes] | None:
    """Return (samples, busy) of a `.metrics` file, or None if it is torn."""
    data = path.read_bytes()
    busy, sep, samples = data.partition(b"\n")
    if not sep or not busy.endswith(b"}"):
        return None
    return samples, busy


def stamp_frames(rows: np.ndarray, now_ns: int) -> tuple[bytes, bytes]:
    """Frames (timestamp = `now_ns`) and (seq, ingest ns) keys of `RESULT_BLOCK_DTYPE` rows."""
    frames = rows["frame"].copy()
    frames["timestamp"] = now_ns
    keys = np.empty((len(rows), 2), dtype="<i8")
    keys[:, 0], keys[:, 1] = rows["seq"], rows["ingest_ns"]
    return frames.tobytes(), keys.tobytes()
