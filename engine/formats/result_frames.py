"""Result frames: Wallaroo's OrderResult frames as numpy rows, built vectorised and read back.

A shard's `.bin` file of a batch (batch.py) is these frames end to end: u32 big-endian
length, then the OrderResult payload (engine.wire.fixish.RESULT_STRUCT), so a receiver
reads it as it reads the forwarder's stream.
"""
from __future__ import annotations

import numpy as np

from engine.wire.fixish import RESULT_LEN
from engine.formats.records import order_id_bytes, symbol_bytes

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
    (batch.stamp_frames).
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
