"""A shard's output of one micro-batch, written by the stateful task itself.

The state task encodes its rejected orders as Wallaroo OrderResult frames and writes
them under `<out>/batches/<batchId>/<shard>.bin`, then their `.seq` sidecar: the
(seq, ingest ns) key of each result, followed, with metrics on, by the task's latency
samples and how long each step kept it busy (a trailer, `ShardFigures`, appended after
the results are durable; `ShardOutput`). The results are fsync'd before the task ends. Latency figures have no file of their own: every file a
batch creates costs the task an inode (27 % of the workers' CPU in a `perf` profile). The
names depend only on the batch id and the shard, and a batch's input and starting state
are fixed by Spark's checkpoint, so a batch that Spark runs again after a crash rewrites
the same files with the same records. A batch becomes visible when Spark commits it
(`results.committed_batch`): no sink stage and no driver-side commit of our own, which
measured ~200 ms per micro-batch with a Python data sink.

`<shard>.seq`: n little-endian int64 pairs (seq, ingest ns), n = size of `<shard>.bin` /
the frame size (0 when the shard had no results and wrote no `.bin`), then, if any, the
trailer: a `_FIGURES_HEAD` (magic, busy length, samples length, CRC-32 of both), the busy
JSON bytes, the samples bytes. The previous version wrote the figures to a
`<shard>.metrics` file (busy, newline, samples); `read_shard_figures` still reads those.
"""
from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Mapping, NamedTuple

import numpy as np

BATCHES = "batches"
KEY_BYTES = 16                           # one (seq, ingest ns) pair of a `.seq` sidecar
_FIGURES_MAGIC = b"MSF1"
_FIGURES_HEAD = struct.Struct("<4sIII")   # magic, busy length, samples length, CRC-32 of busy + samples


class ShardFigures(NamedTuple):
    """A shard's latency figures of one batch: its stamps and its steps' busy times."""
    samples: bytes                       # the task's stamps (engine.spark.step_metrics.BatchStamps)
    busy: bytes                          # step busy times (collector.backpressure.StepBusy)


class TornFigures(ValueError):
    """A shard's latency figures did not all reach the disk (a power cut); its results are intact."""


def batch_dir(out_dir: str | os.PathLike, batch: int) -> Path:
    """Folder of one batch's shard outputs."""
    return Path(out_dir) / BATCHES / f"{batch:012d}"


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


def _open(out_dir: str | os.PathLike, batch: int, name: str):
    # No `mkdir` when the folder is there: even a failing one locks the batches' folder,
    # which the next batch's task and the readers also use. Written in place: readers look
    # at a batch only once Spark has committed it, and a rerun of an uncommitted batch
    # truncates and rewrites the same file.
    try:
        return open(batch_dir(out_dir, batch) / name, "wb")
    except FileNotFoundError:
        return open(_shard_dir(out_dir, batch) / name, "wb")


def _durable(f, data: bytes) -> None:
    f.write(data)
    f.flush()
    os.fsync(f.fileno())


def _figures_trailer(figures: ShardFigures) -> bytes:
    crc = zlib.crc32(figures.samples, zlib.crc32(figures.busy))
    return b"".join((_FIGURES_HEAD.pack(_FIGURES_MAGIC, len(figures.busy), len(figures.samples), crc),
                     figures.busy, figures.samples))


class ShardOutput:
    """One shard's files of one batch, written in two steps: its results, then its figures.

    `write_results` writes the OrderResult frames (`.bin`) and their keys (`.seq`), each
    fsync'd, then the folder, as results must be. `write_figures` then appends the latency
    figures to the still open `.seq` (or, for a shard without results, writes a `.seq` of
    figures alone), without an fsync: an fsync per task costs milliseconds to tens of
    milliseconds while the ingress fsyncs its log, on the batch's critical path, and these
    are figures, not results. A SIGKILL loses nothing (the page cache keeps the file);
    after a power cut a committed batch may lack its figures or have them torn, which the
    reader skips (`read_shard_figures`). So the figures cost no file of their own, and the
    sink's busy time they carry covers every byte and fsync of the results.

    Example::

        with ShardOutput(out_dir, batch, shard) as out:
            out.write_results(frames, seqs)
            out.write_figures(ShardFigures(samples, busy))
    """

    def __init__(self, out_dir: str | os.PathLike, batch: int, shard: int):
        self.out_dir, self.batch, self.shard = out_dir, batch, shard
        self._sidecar = None

    def write_results(self, frames: bytes, seqs: bytes) -> None:
        """Write the shard's OrderResult `frames` and their (seq, ingest ns) `seqs`, durably."""
        if not frames:
            return
        with _open(self.out_dir, self.batch, f"{self.shard}.bin") as f:
            _durable(f, frames)
        self._sidecar = _open(self.out_dir, self.batch, f"{self.shard}.seq")
        _durable(self._sidecar, seqs)
        fsync_dir(batch_dir(self.out_dir, self.batch))

    def write_figures(self, figures: ShardFigures) -> None:
        """Append the shard's latency `figures` to its keys' sidecar (not fsync'd)."""
        if self._sidecar is None:        # no results: the sidecar holds the figures alone
            self._sidecar = _open(self.out_dir, self.batch, f"{self.shard}.seq")
        self._sidecar.write(_figures_trailer(figures))

    def close(self) -> None:
        if self._sidecar is not None:
            self._sidecar.close()
            self._sidecar = None

    def __enter__(self) -> "ShardOutput":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_shard_results(out_dir: str | os.PathLike, batch: int, shard: int, frames: bytes, seqs: bytes,
                        figures: ShardFigures | None = None) -> None:
    """Write one shard's output of `batch` in one call: `frames`, their `seqs` keys, its `figures`."""
    with ShardOutput(out_dir, batch, shard) as out:
        out.write_results(frames, seqs)
        if figures is not None:
            out.write_figures(figures)


def _decode_trailer(data: bytes, path: Path) -> ShardFigures:
    if len(data) >= _FIGURES_HEAD.size:
        magic, n_busy, n_samples, crc = _FIGURES_HEAD.unpack_from(data)
        body = memoryview(data)[_FIGURES_HEAD.size:]
        if magic == _FIGURES_MAGIC and len(body) == n_busy + n_samples and zlib.crc32(body) == crc:
            return ShardFigures(bytes(body[n_busy:]), bytes(body[:n_busy]))
    raise TornFigures(path)


def _decode_old(data: bytes, path: Path) -> ShardFigures:
    busy, sep, samples = data.partition(b"\n")
    if not sep or not busy.endswith(b"}"):
        raise TornFigures(path)
    return ShardFigures(samples, busy)


def read_shard_figures(d: Path, shard: int, results: int, sizes: Mapping[str, int]) -> ShardFigures | None:
    """Return a shard's figures in batch folder `d` (file name -> size), or None if it wrote none.

    They follow the `results` keys of its `.seq` sidecar; in a folder of the previous
    version, they are its `.metrics` file (a trailer wins over one: a batch that version
    left uncommitted and this one ran again). Raises TornFigures when they are torn.
    """
    seq = f"{shard}.seq"
    # A sidecar without results exists only for its figures: an empty one is torn.
    if sizes.get(seq, 0) > results * KEY_BYTES or (seq in sizes and not results):
        with open(d / seq, "rb") as f:
            f.seek(results * KEY_BYTES)
            return _decode_trailer(f.read(), d / seq)
    old = f"{shard}.metrics"
    if old in sizes:
        return _decode_old((d / old).read_bytes(), d / old)
    return None


def stamp_frames(rows: np.ndarray, now_ns: int) -> tuple[bytes, bytes]:
    """Frames (timestamp = `now_ns`) and (seq, ingest ns) keys of `RESULT_BLOCK_DTYPE` rows."""
    frames = rows["frame"].copy()
    frames["timestamp"] = now_ns
    keys = np.empty((len(rows), 2), dtype="<i8")
    keys[:, 0], keys[:, 1] = rows["seq"], rows["ingest_ns"]
    return frames.tobytes(), keys.tobytes()
