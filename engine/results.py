"""Result records: vectorised encoding to Wallaroo's OrderResult, reading committed output."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from .fixish import RESULT_LEN

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

    The frame's timestamp is left 0: the sink stamps it when it writes the frame.
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


def manifests(out_dir: str | os.PathLike) -> list[dict]:
    """Return the committed batch manifests in batch order."""
    mdir = Path(out_dir) / "_manifest"
    if not mdir.is_dir():
        return []
    names = sorted(p for p in mdir.iterdir() if p.suffix == ".json")
    return [json.loads(p.read_text()) for p in names]


def iter_parts(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield committed part files (`.bin`) in batch, then seq order."""
    for m in manifests(out_dir):
        for name in m["parts"]:
            yield Path(out_dir) / "parts" / (name + ".bin")


def read_committed(out_dir: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Return (result frames, (seq, ingest_ns) pairs) of every committed batch."""
    frames, sides = [], []
    for p in iter_parts(out_dir):
        frames.append(p.read_bytes())
        sides.append(p.with_suffix(".seq").read_bytes())
    # Joined as bytes: numpy's concatenate would turn the big-endian fields native.
    return (np.frombuffer(b"".join(frames), dtype=RESULT_FRAME),
            np.frombuffer(b"".join(sides), dtype="<i8").reshape(-1, 2))


class ManifestTail:
    """Follow committed batches in order, reading each manifest once.

    Spark batch ids are consecutive and every batch (even an empty one) commits a
    manifest, so the next one to read is always `<next_batch>.json`.
    """

    def __init__(self, out_dir: str | os.PathLike, next_batch: int = 0):
        self.dir = Path(out_dir)
        self.next_batch = next_batch
        self.count = 0

    def poll(self) -> list[dict]:
        """Return manifests committed since the last poll."""
        new = []
        while True:
            p = self.dir / "_manifest" / f"{self.next_batch:012d}.json"
            try:
                m = json.loads(p.read_text())
            except FileNotFoundError:
                return new
            new.append(m)
            self.count += m["count"]
            self.next_batch += 1


def result_tuples(frames: np.ndarray) -> list[tuple]:
    """Turn result frames into comparable tuples without the timestamp."""
    return [(int(r["side"]), int(r["account"]), bytes(r["order_id"]), bytes(r["symbol"]),
             float(r["qty"]), float(r["price"]), float(r["bid"]), float(r["offer"])) for r in frames]
