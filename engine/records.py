"""Vectorised decoding of ingress-log records into columns (numpy, no per-event Python).

Symbols travel as the 4 symbol bytes read as a big-endian int32 and order ids as the
6 id bytes read as a big-endian integer: fixed-width numbers keep Arrow batches small
and every step vectorised; `symbol_bytes`/`order_id_bytes` turn them back.
"""
from __future__ import annotations

import numpy as np

from .fixish import NBBO_FIELDS, NBBO_TYPE, ORDER_FIELDS, ORDER_TYPE
from .ingress_log import PAYLOAD_OFFSET

# Column order is the Spark source schema's order.
SOURCE_COLUMNS = ("seq", "ingest_ns", "shard", "kind", "symbol", "side", "account",
                  "order_id", "qty", "price", "bid", "offer")
SOURCE_SCHEMA = ("seq long, ingest_ns long, shard int, kind byte, symbol int, side byte, "
                 "account long, order_id long, qty double, price double, bid double, offer double")


def _field(rec: np.ndarray, offset: int, width: int, dtype: str) -> np.ndarray:
    start = PAYLOAD_OFFSET + offset
    return np.ascontiguousarray(rec[:, start:start + width]).view(dtype).reshape(-1)


def shard_of(symbol: np.ndarray, n_shards: int) -> np.ndarray:
    """Map symbol ints to shards with a multiplicative hash (stable across runs)."""
    h = (symbol.astype(np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    return ((h >> np.uint64(16)) % np.uint64(n_shards)).astype(np.int32)


def decode_records(rec: np.ndarray, first_seq: int, n_shards: int) -> dict[str, np.ndarray]:
    """Decode (n, 64) log records into the source columns."""
    n = rec.shape[0]
    kind = rec[:, PAYLOAD_OFFSET].astype(np.int8)
    is_order = kind == ORDER_TYPE
    ingest = np.ascontiguousarray(rec[:, :8]).view("<i8").reshape(-1)
    sym_n = _field(rec, NBBO_FIELDS["symbol"], 4, ">i4")
    sym_o = _field(rec, ORDER_FIELDS["symbol"], 4, ">i4")
    symbol = np.where(is_order, sym_o, sym_n).astype(np.int32)
    oid = np.zeros((n, 8), dtype=np.uint8)
    off = PAYLOAD_OFFSET + ORDER_FIELDS["order_id"]
    oid[:, 2:] = rec[:, off:off + 6]
    zero = np.zeros(n)
    return {
        "seq": np.arange(first_seq, first_seq + n, dtype=np.int64),
        "ingest_ns": ingest.astype(np.int64),
        "shard": shard_of(symbol, n_shards),
        "kind": kind,
        "symbol": symbol,
        "side": np.where(is_order, rec[:, PAYLOAD_OFFSET + ORDER_FIELDS["side"]], 0).astype(np.int8),
        "account": np.where(is_order, _field(rec, ORDER_FIELDS["account"], 4, ">u4"), 0).astype(np.int64),
        "order_id": np.where(is_order, oid.view(">i8").reshape(-1), 0).astype(np.int64),
        "qty": np.where(is_order, _field(rec, ORDER_FIELDS["qty"], 8, ">f8"), zero),
        "price": np.where(is_order, _field(rec, ORDER_FIELDS["price"], 8, ">f8"), zero),
        "bid": np.where(kind == NBBO_TYPE, _field(rec, NBBO_FIELDS["bid"], 8, ">f8"), zero),
        "offer": np.where(kind == NBBO_TYPE, _field(rec, NBBO_FIELDS["offer"], 8, ">f8"), zero),
    }


def symbol_bytes(symbol: np.ndarray) -> np.ndarray:
    """Turn symbol ints back into (n, 4) bytes."""
    return np.asarray(symbol, dtype=">i4").view(np.uint8).reshape(-1, 4)


def order_id_bytes(order_id: np.ndarray) -> np.ndarray:
    """Turn order-id ints back into (n, 6) bytes."""
    return np.asarray(order_id, dtype=">i8").view(np.uint8).reshape(-1, 8)[:, 2:]


def symbol_int(symbol: bytes) -> int:
    """Return the int form of a 4-byte symbol."""
    return int.from_bytes(symbol, "big", signed=True)
