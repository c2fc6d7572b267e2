"""Wallaroo's "fixish" wire format: u32 big-endian length, then a fixed payload.

Pure codec, no I/O. Single-message helpers serve tools and tests; the vectorised
`FrameScanner` serves the ingress hot path (numpy over whole receive buffers).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

NBBO_TYPE = 2
ORDER_TYPE = 1

NBBO_STRUCT = struct.Struct(">B4s21sdd")        # type, symbol, transact_time, bid, offer
ORDER_STRUCT = struct.Struct(">BBI6s4sdd21s")   # type, side, account, order_id, symbol, qty, price, time
RESULT_STRUCT = struct.Struct(">BI6s4sddddQ")   # side, account, order_id, symbol, qty, price, bid, offer, ts
HEADER = struct.Struct(">I")

NBBO_LEN = NBBO_STRUCT.size      # 42
ORDER_LEN = ORDER_STRUCT.size    # 53
RESULT_LEN = RESULT_STRUCT.size  # 55

STREAM_NBBO = "nbbo"
STREAM_ORDERS = "orders"
STREAM_TYPE = {STREAM_NBBO: NBBO_TYPE, STREAM_ORDERS: ORDER_TYPE}
TYPE_LEN = {NBBO_TYPE: NBBO_LEN, ORDER_TYPE: ORDER_LEN}

# Byte offsets of fields inside a payload, used by vectorised decoders.
NBBO_FIELDS = {"symbol": 1, "time": 5, "bid": 26, "offer": 34}
ORDER_FIELDS = {"side": 1, "account": 2, "order_id": 6, "symbol": 12, "qty": 16, "price": 24, "time": 32}


class Nbbo(NamedTuple):
    symbol: bytes
    transact_time: bytes
    bid: float
    offer: float


class Order(NamedTuple):
    side: int
    account: int
    order_id: bytes
    symbol: bytes
    qty: float
    price: float
    transact_time: bytes


class OrderResult(NamedTuple):
    side: int
    account: int
    order_id: bytes
    symbol: bytes
    qty: float
    price: float
    bid: float
    offer: float
    timestamp: int


def pad_symbol(symbol: str | bytes) -> bytes:
    """Left-pad a symbol with spaces to 4 bytes, as Wallaroo's fixtures do."""
    raw = symbol.encode("ascii") if isinstance(symbol, str) else symbol
    if len(raw) > 4:
        raise ValueError(f"symbol longer than 4 bytes: {raw!r}")
    return raw.rjust(4, b" ")


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its u32 length."""
    return HEADER.pack(len(payload)) + payload


def encode_nbbo(m: Nbbo) -> bytes:
    """Encode one NBBO message, framed."""
    return frame(NBBO_STRUCT.pack(NBBO_TYPE, m.symbol, m.transact_time, m.bid, m.offer))


def encode_order(m: Order) -> bytes:
    """Encode one order message, framed."""
    return frame(ORDER_STRUCT.pack(ORDER_TYPE, m.side, m.account, m.order_id, m.symbol,
                                   m.qty, m.price, m.transact_time))


def encode_result(m: OrderResult) -> bytes:
    """Encode one rejected-order result, framed (u32 55 + 55 bytes)."""
    return frame(RESULT_STRUCT.pack(*m))


def decode_payload(payload: bytes) -> Nbbo | Order:
    """Decode one unframed NBBO or order payload; raise ValueError if malformed."""
    if not payload:
        raise ValueError("empty payload")
    kind = payload[0]
    if kind == NBBO_TYPE and len(payload) == NBBO_LEN:
        _, sym, t, bid, offer = NBBO_STRUCT.unpack(payload)
        return Nbbo(sym, t, bid, offer)
    if kind == ORDER_TYPE and len(payload) == ORDER_LEN:
        _, side, acct, oid, sym, qty, price, t = ORDER_STRUCT.unpack(payload)
        return Order(side, acct, oid, sym, qty, price, t)
    raise ValueError(f"type {kind} with length {len(payload)} is neither NBBO nor order")


def decode_result(payload: bytes) -> OrderResult:
    """Decode one unframed result payload."""
    return OrderResult(*RESULT_STRUCT.unpack(payload))


def iter_frames(data: bytes):
    """Yield payloads of a well-formed framed byte string; raise ValueError on a bad tail."""
    pos, n = 0, len(data)
    while pos < n:
        if pos + 4 > n:
            raise ValueError(f"truncated header at byte {pos}")
        (length,) = HEADER.unpack_from(data, pos)
        if pos + 4 + length > n:
            raise ValueError(f"truncated frame at byte {pos}")
        yield data[pos + 4: pos + 4 + length]
        pos += 4 + length


def read_results(data: bytes) -> list[OrderResult]:
    """Decode a file of framed result records."""
    out = []
    for payload in iter_frames(data):
        if len(payload) != RESULT_LEN:
            raise ValueError(f"result frame of length {len(payload)}, expected {RESULT_LEN}")
        out.append(decode_result(payload))
    return out


# --------------------------------------------------------------------------- scanning

@dataclass(frozen=True)
class BadFrame:
    """A run of bytes that was not a valid message, with the reason it was set aside."""
    reason: str
    data: bytes


@dataclass(frozen=True)
class ScanResult:
    """What one scan of a receive buffer found: good payloads, bad runs, unconsumed tail."""
    payloads: np.ndarray      # (n, payload_len) uint8, one row per good message, in order
    bad: list[BadFrame]
    consumed: int             # bytes of the buffer fully accounted for


def _header_bytes(kind: int) -> np.ndarray:
    return np.frombuffer(HEADER.pack(TYPE_LEN[kind]) + bytes([kind]), dtype=np.uint8)


class FrameScanner:
    """Split a stream's bytes into valid messages and set-aside garbage.

    A header is valid only when it announces exactly this stream's message length and
    the payload starts with this stream's type byte. Anything else (wrong length, unknown
    or other-stream type, oversized or garbage bytes) is skipped up to the next valid
    header and reported as one `BadFrame`; the claimed length of a bad header is never
    trusted, so an oversized length allocates nothing and swallows no good message.

    The common case, a buffer of back-to-back valid frames, is checked in one numpy
    comparison; the resynchronising walk runs only when something is wrong.
    """

    def __init__(self, stream: str):
        self.kind = STREAM_TYPE[stream]
        self.payload_len = TYPE_LEN[self.kind]
        self.frame_len = 4 + self.payload_len
        self._hdr = _header_bytes(self.kind)
        self._hdr_bytes = self._hdr.tobytes()
        self._other = {k: _header_bytes(k).tobytes() for k in TYPE_LEN if k != self.kind}

    def scan(self, buf: bytes | bytearray | memoryview, final: bool = False) -> ScanResult:
        """Scan `buf`; with `final`, an incomplete tail is reported as truncated."""
        arr = np.frombuffer(buf, dtype=np.uint8)
        n_whole = len(arr) // self.frame_len
        if n_whole:
            frames = arr[: n_whole * self.frame_len].reshape(n_whole, self.frame_len)
            if bool((frames[:, :5] == self._hdr).all()):
                tail = len(arr) - n_whole * self.frame_len
                if tail == 0 or self._plausible_prefix(arr[n_whole * self.frame_len:]):
                    res = ScanResult(frames[:, 4:].copy(), [], n_whole * self.frame_len)
                    return self._finish(arr, res, final)
        return self._finish(arr, self._walk(arr), final)

    def _plausible_prefix(self, tail: np.ndarray) -> bool:
        k = min(len(tail), 5)
        return bool((tail[:k] == self._hdr[:k]).all())

    def _finish(self, arr: np.ndarray, res: ScanResult, final: bool) -> ScanResult:
        if final and res.consumed < len(arr):
            rest = arr[res.consumed:].tobytes()
            reason = "truncated frame" if self._plausible_prefix(arr[res.consumed:]) else "garbage bytes"
            return ScanResult(res.payloads, res.bad + [BadFrame(reason, rest)], len(arr))
        return res

    def _walk(self, arr: np.ndarray) -> ScanResult:
        data = arr.tobytes()
        n = len(data)
        good: list[int] = []
        bad: list[BadFrame] = []
        pos = 0
        while pos < n:
            if data.startswith(self._hdr_bytes, pos):
                if pos + self.frame_len > n:
                    break                      # wait for the rest of the frame
                good.append(pos + 4)
                pos += self.frame_len
                continue
            if n - pos < 5 and self._plausible_prefix(arr[pos:]):
                break                          # maybe the start of a valid header
            nxt = data.find(self._hdr_bytes, pos + 1)
            if nxt < 0:
                # keep the last 4 bytes: they may begin a header that is still arriving
                nxt = max(pos + 1, n - 4)
                while nxt < n and not self._plausible_prefix(arr[nxt:]):
                    nxt += 1
            bad.append(BadFrame(self._reason(data, pos, nxt), data[pos:nxt]))
            pos = nxt
        if good:
            idx = np.asarray(good)[:, None] + np.arange(self.payload_len)
            payloads = arr[idx]
        else:
            payloads = np.empty((0, self.payload_len), dtype=np.uint8)
        return ScanResult(payloads, bad, pos)

    def _reason(self, data: bytes, pos: int, end: int) -> str:
        if end - pos < 5:
            return "garbage bytes"
        (length,) = HEADER.unpack_from(data, pos)
        kind = data[pos + 4]
        if length > 1 << 16:
            return f"oversized frame (length {length})"
        for other in self._other.values():
            if data.startswith(other, pos):
                return f"message of type {kind} on the wrong stream"
        if kind not in TYPE_LEN:
            return f"unknown message type {kind} (length {length})"
        if length != TYPE_LEN[kind]:
            return f"wrong length {length} for message type {kind}"
        return "garbage bytes"
