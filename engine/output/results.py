"""Result records: vectorised encoding to Wallaroo's OrderResult, reading committed batches."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from engine.spark.batch_output import KEY_BYTES, TornFigures, batch_dir, read_shard_figures
from engine.wire.fixish import RESULT_LEN
from engine.wire.records import order_id_bytes, symbol_bytes
from engine.storage.retention import BatchFootprint
from engine.storage.safe_delete import remove_tree

log = logging.getLogger(__name__)

RESULT_FRAME = np.dtype([
    ("len", ">u4"), ("side", "u1"), ("account", ">u4"), ("order_id", "u1", (6,)),
    ("symbol", "u1", (4,)), ("qty", ">f8"), ("price", ">f8"), ("bid", ">f8"),
    ("offer", ">f8"), ("timestamp", ">u8"),
])
assert RESULT_FRAME.itemsize == 4 + RESULT_LEN


# A result on its way from the state task to the sink: the frame and where it came from.
RESULT_BLOCK_DTYPE = np.dtype([("frame", RESULT_FRAME), ("seq", "<i8"), ("ingest_ns", "<i8")])


def encode_results(orders: np.ndarray, bid: np.ndarray, offer: np.ndarray) -> np.ndarray:
    """Build result rows (OrderResult frame, seq, ingest ns) from rejected order events.

    The frame's timestamp is left 0: it is stamped when the frames are written
    (batch_output.stamp_frames).
    """
    out = np.zeros(len(orders), dtype=RESULT_BLOCK_DTYPE)
    f = out["frame"]
    f["len"] = RESULT_LEN
    f["side"] = orders["side"]
    f["account"] = orders["account"]
    f["order_id"] = order_id_bytes(orders["order_id"])
    f["symbol"] = symbol_bytes(orders["symbol"])
    f["qty"], f["price"] = orders["a"], orders["b"]
    f["bid"], f["offer"] = bid, offer
    out["seq"], out["ingest_ns"] = orders["seq"], orders["ingest_ns"]
    return out


@dataclass(frozen=True)
class CommittedBatch:
    """What one committed micro-batch left: its shards' result files and latency samples."""
    batch: int
    parts: list[Path]                 # `.bin` files (OrderResult frames), in shard order
    count: int                        # result records in them
    metrics: list[bytes]              # each shard's stamps (engine.spark.step_metrics.decode_figures)
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


def iter_parts(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield committed part files (`.bin`) in batch, then shard order."""
    for m in committed_batches(out_dir):
        yield from m.parts


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


def result_tuples(frames: np.ndarray) -> list[tuple]:
    """Turn result frames into comparable tuples without the timestamp."""
    return [(int(r["side"]), int(r["account"]), bytes(r["order_id"]), bytes(r["symbol"]),
             float(r["qty"]), float(r["price"]), float(r["bid"]), float(r["offer"])) for r in frames]
