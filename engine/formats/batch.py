"""A batch folder: each shard's output of one micro-batch, written by the stateful task
itself and read, once Spark has committed the batch, by the driver's readers.

The state task encodes its rejected orders as Wallaroo OrderResult frames and writes
them under `<out>/batches/<batchId>/<shard>.bin`, then their `.seq` sidecar: the
(seq, ingest ns) key of each result, followed, with metrics on, by the task's latency
samples and how long each step kept it busy (a trailer, `ShardFigures`, appended after
the results are durable; `ShardOutput`). The results are fsync'd before the task ends. Latency figures have no file of their own: every file a
batch creates costs the task an inode (27 % of the workers' CPU in a `perf` profile). The
names depend only on the batch id and the shard, and a batch's input and starting state
are fixed by Spark's checkpoint, so a batch that Spark runs again after a crash rewrites
the same files with the same records. A batch becomes visible when Spark commits it
(`committed_batch`): no sink stage and no driver-side commit of our own, which
measured ~200 ms per micro-batch with a Python data sink.

`<shard>.seq`: n little-endian int64 pairs (seq, ingest ns), n = size of `<shard>.bin` /
the frame size (0 when the shard had no results and wrote no `.bin`), then, if any, the
trailer: a `_FIGURES_HEAD` (magic, busy length, samples length, CRC-32 of both), the busy
JSON bytes, the samples bytes. The previous version wrote the figures to a
`<shard>.metrics` file (busy, newline, samples); `read_shard_figures` still reads those.

The readers: `read_batch` one committed batch, `committed_batches` and `BatchTail` each
once in batch order, `read_committed` all of them; retention's side: `retained-from`
(`retained_from`), `batch_footprints`, `delete_batches`.
"""
from __future__ import annotations

import logging
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, NamedTuple

import numpy as np

from collector.safe_delete import remove_tree

from engine.formats.result_frames import RESULT_FRAME
from engine.storage.retention import BatchFootprint

log = logging.getLogger(__name__)

BATCHES = "batches"
KEY_BYTES = 16                           # one (seq, ingest ns) pair of a `.seq` sidecar
_FIGURES_MAGIC = b"MSF1"
_FIGURES_HEAD = struct.Struct("<4sIII")   # magic, busy length, samples length, CRC-32 of busy + samples


class ShardFigures(NamedTuple):
    """A shard's latency figures of one batch: its stamps and its steps' busy times."""
    samples: bytes                       # the task's stamps (engine.formats.stamps.BatchStamps)
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


@dataclass(frozen=True)
class CommittedBatch:
    """What one committed micro-batch left: its shards' result files and latency samples."""
    batch: int
    parts: list[Path]                 # `.bin` files (OrderResult frames), in shard order
    count: int                        # result records in them
    metrics: list[bytes]              # each shard's stamps (engine.formats.stamps.decode_figures)
    busy: list[bytes]                 # each shard's encoded step busy times (collector.backpressure)
    committed_ns: int                 # when Spark committed it (its commit log entry's mtime)


def commit_log_dir(out_dir: str | os.PathLike) -> Path:
    """Spark's commit log of the job writing `out_dir`.

    Config puts the checkpoint beside the results (`<state>/checkpoint`, `<state>/results`).
    """
    return Path(out_dir).parent / "checkpoint" / "commits"


def committed_batch(out_dir: str | os.PathLike) -> int:
    """Return the last batch id Spark has committed (-1 if none).

    Spark writes `commits/<batchId>` atomically after every task of the batch has
    finished, and purges old entries, so the newest entry covers all earlier batches.
    """
    try:
        names = os.listdir(commit_log_dir(out_dir))
    except FileNotFoundError:
        return -1
    return max((int(n) for n in names if n.isdigit()), default=-1)


def read_batch(out_dir: str | os.PathLike, batch: int) -> CommittedBatch:
    """Read what a committed batch wrote (an empty batch wrote nothing)."""
    d = batch_dir(out_dir, batch)
    try:
        with os.scandir(d) as it:
            sizes = {e.name: e.stat().st_size for e in it}
    except FileNotFoundError:
        sizes = {}
    shards = sorted({int(stem) for stem, _, ext in (n.partition(".") for n in sizes)
                     if stem.isdigit() and ext in ("bin", "seq", "metrics")})
    parts, metrics, busy = [], [], []
    count = 0
    for shard in shards:
        results = 0
        if f"{shard}.bin" in sizes:
            parts.append(d / f"{shard}.bin")
            results = sizes[f"{shard}.bin"] // RESULT_FRAME.itemsize
            count += results
        try:
            got = read_shard_figures(d, shard, results, sizes)
        except TornFigures as e:
            log.warning("batch %d: %s is torn (a power cut before it reached the disk); its "
                        "latency figures are skipped", batch, e)
            continue
        if got is not None:
            metrics.append(got.samples)
            busy.append(got.busy)
    try:
        committed = os.stat(commit_log_dir(out_dir) / str(batch)).st_mtime_ns
    except FileNotFoundError:
        committed = 0                 # purged by Spark since
    return CommittedBatch(batch, parts, count, metrics, busy, committed)


RETAINED_FROM = "retained-from"          # first batch retention has not deleted (text)


def retained_from(out_dir: str | os.PathLike) -> int:
    """The first result batch still kept; every batch below it was deleted by retention.

    Written before any folder goes, so a reader that checks it after reading a batch knows
    whether the batch may have been deleted under it.
    """
    try:
        return int((Path(out_dir) / RETAINED_FROM).read_text())
    except (FileNotFoundError, ValueError):
        return 0


def _read_whole(out_dir: str | os.PathLike, batch: int) -> CommittedBatch | None:
    """Read a committed batch, or None if retention deleted it (perhaps while reading)."""
    try:
        m = read_batch(out_dir, batch)
    except FileNotFoundError:
        m = None
    return None if batch < retained_from(out_dir) else m


def committed_batches(out_dir: str | os.PathLike, start: int = 0) -> Iterator[CommittedBatch]:
    """Yield every committed batch from `start` on that retention still keeps, in batch order."""
    for b in range(max(start, retained_from(out_dir)), committed_batch(out_dir) + 1):
        m = _read_whole(out_dir, b)
        if m is not None:
            yield m


def _read_keys(path: Path, n: int) -> bytes:
    """The (seq, ingest ns) keys of a `.seq` sidecar's `n` results, without the figures after them."""
    with open(path, "rb") as f:
        return f.read(n * KEY_BYTES)


@dataclass(frozen=True)
class RetainedResults:
    """The committed results retention still keeps: batches `first..last`, whole."""
    frames: np.ndarray                # OrderResult frames, in batch, then shard order
    side: np.ndarray                  # (seq, ingest ns) per frame
    first: int                        # first batch read (the ones below were deleted)
    last: int                         # newest committed batch


def read_retained(out_dir: str | os.PathLike) -> RetainedResults:
    """Read every committed batch still kept; a batch deleted while reading is left out whole."""
    last = committed_batch(out_dir)
    got: list[tuple[int, bytes, bytes]] = []
    for b in range(retained_from(out_dir), last + 1):
        try:
            m = read_batch(out_dir, b)
            frames = [p.read_bytes() for p in m.parts]
            got.append((b, b"".join(frames), b"".join(_read_keys(p.with_suffix(".seq"), len(f) // RESULT_FRAME.itemsize)
                                                      for p, f in zip(m.parts, frames))))
        except FileNotFoundError:
            pass                      # deleted while reading: dropped below
    first = max(retained_from(out_dir), got[0][0] if got else last + 1)
    kept = [g for g in got if g[0] >= first]
    # Joined as bytes: numpy's concatenate would turn the big-endian fields native.
    frames = np.frombuffer(b"".join(g[1] for g in kept), dtype=RESULT_FRAME)
    side = np.frombuffer(b"".join(g[2] for g in kept), dtype="<i8").reshape(-1, 2)
    return RetainedResults(frames, side, first, last)


def read_committed(out_dir: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Return (result frames, (seq, ingest_ns) pairs) of every committed batch still kept.

    Logs one warning when retention has deleted older batches: the output starts later.
    """
    r = read_retained(out_dir)
    if r.first > 0:
        log.warning("results of batches 0..%d (%d batches) were deleted by retention "
                    "(--results-retention); read batches %d..%d", r.first - 1, r.first, r.first, r.last)
    return r.frames, r.side


def batch_footprints(out_dir: str | os.PathLike, start: int, end: int) -> list[BatchFootprint]:
    """Disk use and write time of each batch folder in [start, end] (batches that wrote nothing have none).

    Disk use is what the files and the folder take on disk (allocated blocks), not their
    lengths: a batch's files are small, and the size bound is meant for the disk.
    """
    out = []
    for b in range(start, end + 1):
        d = batch_dir(out_dir, b)
        try:
            with os.scandir(d) as it:
                files = [e.stat(follow_symlinks=False) for e in it]
            folder = d.lstat().st_blocks * 512
        except FileNotFoundError:
            continue
        if files:
            out.append(BatchFootprint(b, folder + sum(f.st_blocks * 512 for f in files),
                                      max(f.st_mtime_ns for f in files)))
    return out


def delete_batches(out_dir: str | os.PathLike, keep_from: int, known: list[int]) -> tuple[int, list[int]]:
    """Delete the folders of batches below `keep_from` (`known` ids); return the bytes freed and the ids left.

    `retained-from` is advanced (atomically, durably) before any folder goes, so readers
    can tell a deleted batch from an empty one. Links are removed as links, never followed
    (safe_delete.remove_tree); a folder that could not be removed is returned for a retry.
    """
    out = Path(out_dir)
    if keep_from > retained_from(out_dir):
        tmp = out / (RETAINED_FROM + ".tmp")
        with open(tmp, "w") as f:
            f.write(str(keep_from))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(out / RETAINED_FROM)
    freed, left = 0, []
    for b in known:
        if b >= keep_from:
            continue
        try:
            freed += remove_tree(batch_dir(out, b))
        except OSError as e:
            log.warning("results retention could not remove batch %d yet: %s", b, e)
            left.append(b)
    return freed, left


class BatchTail:
    """Follow committed batches in order, reading each once.

    Spark's batch ids are consecutive, so everything up to the newest commit log entry
    is committed; the next one to read is always `next_batch`. A tail that falls behind
    retention (a Kafka consumer out of range) skips to the first kept batch, counts the
    lost batches in `missed` and logs one warning saying how many.
    """

    def __init__(self, out_dir: str | os.PathLike, next_batch: int = 0, reader: str = "reader"):
        self.dir = Path(out_dir)
        self.next_batch = next_batch
        self.reader = reader
        self.count = 0
        self.missed = 0

    def poll(self) -> list[CommittedBatch]:
        """Return batches committed since the last poll."""
        new: list[CommittedBatch] = []
        last = committed_batch(self.dir)
        self.skip_deleted()
        while self.next_batch <= last:
            m = _read_whole(self.dir, self.next_batch)
            if m is None:             # deleted before or while it was read
                if not self.skip_deleted():
                    log.warning("%s: the files of batch %d went away, not by retention; skipped it",
                                self.reader, self.next_batch)
                    self.missed += 1
                    self.next_batch += 1
                continue
            new.append(m)
            self.count += m.count
            self.next_batch += 1
        return new

    def skip_deleted(self) -> int:
        """Move past batches retention deleted before this tail read them; return how many."""
        lost = retained_from(self.dir) - self.next_batch
        if lost <= 0:
            return 0
        log.warning("%s fell behind the results retention: batches %d..%d (%d batches) were deleted "
                    "before it read them; continuing at batch %d", self.reader, self.next_batch,
                    self.next_batch + lost - 1, lost, self.next_batch + lost)
        self.missed += lost
        self.next_batch += lost
        return lost
