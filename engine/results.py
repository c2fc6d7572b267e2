"""Result records: vectorised encoding to Wallaroo's OrderResult, reading committed batches."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from .batch_output import batch_dir, read_shard_metrics
from .fixish import RESULT_LEN

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
    from .records import order_id_bytes, symbol_bytes
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
    metrics: list[bytes]              # each shard's encoded samples (collector.samples)
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
        names = sorted(os.listdir(d), key=lambda n: (len(n), n))
    except FileNotFoundError:
        names = []
    parts = [d / n for n in names if n.endswith(".bin")]
    metrics, busy = [], []
    for n in names:
        if n.endswith(".metrics"):
            got = read_shard_metrics(d / n)
            if got is None:
                log.warning("batch %d: %s is torn (a power cut before it reached the disk); its "
                            "latency figures are skipped", batch, d / n)
                continue
            metrics.append(got[0])
            busy.append(got[1])
    count = sum(p.stat().st_size for p in parts) // RESULT_FRAME.itemsize
    try:
        committed = os.stat(commit_log_dir(out_dir) / str(batch)).st_mtime_ns
    except FileNotFoundError:
        committed = 0                 # purged by Spark since
    return CommittedBatch(batch, parts, count, metrics, busy, committed)


def committed_batches(out_dir: str | os.PathLike, start: int = 0) -> Iterator[CommittedBatch]:
    """Yield every committed batch from `start` on, in batch order."""
    for b in range(start, committed_batch(out_dir) + 1):
        yield read_batch(out_dir, b)


def iter_parts(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield committed part files (`.bin`) in batch, then shard order."""
    for m in committed_batches(out_dir):
        yield from m.parts


def read_committed(out_dir: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Return (result frames, (seq, ingest_ns) pairs) of every committed batch."""
    frames, sides = [], []
    for p in iter_parts(out_dir):
        frames.append(p.read_bytes())
        sides.append(p.with_suffix(".seq").read_bytes())
    # Joined as bytes: numpy's concatenate would turn the big-endian fields native.
    return (np.frombuffer(b"".join(frames), dtype=RESULT_FRAME),
            np.frombuffer(b"".join(sides), dtype="<i8").reshape(-1, 2))


class BatchTail:
    """Follow committed batches in order, reading each once.

    Spark's batch ids are consecutive, so everything up to the newest commit log entry
    is committed; the next one to read is always `next_batch`.
    """

    def __init__(self, out_dir: str | os.PathLike, next_batch: int = 0):
        self.dir = Path(out_dir)
        self.next_batch = next_batch
        self.count = 0

    def poll(self) -> list[CommittedBatch]:
        """Return batches committed since the last poll."""
        new = list(committed_batches(self.dir, self.next_batch))
        for m in new:
            self.count += m.count
        self.next_batch += len(new)
        return new


def result_tuples(frames: np.ndarray) -> list[tuple]:
    """Turn result frames into comparable tuples without the timestamp."""
    return [(int(r["side"]), int(r["account"]), bytes(r["order_id"]), bytes(r["symbol"]),
             float(r["qty"]), float(r["price"]), float(r["bid"]), float(r["offer"])) for r in frames]
