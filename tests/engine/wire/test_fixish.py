"""The fixish codec round-trips Wallaroo's fixtures; the scanner keeps every good frame."""
from __future__ import annotations

import struct
import time
import tracemalloc

import numpy as np
import pytest

from engine.wire.fixish import HEADER, NBBO_LEN, ORDER_LEN, FrameScanner, Nbbo, Order, OrderResult, decode_payload, encode_nbbo, encode_order, encode_result, frame, iter_frames, read_results

DEMO = "demo-2017"


def _nbbo(i: int) -> bytes:
    return encode_nbbo(Nbbo(f"S{i % 1000:03d}".encode(), b"20151204-14:30:00.000", 10.0 + i, 10.5 + i))


def _order(i: int) -> bytes:
    return encode_order(Order(1 + i % 2, i, f"{i:06d}".encode(), b" ABC", 100.0 + i, 1.5,
                              b"20151204-14:30:00.000"))


GOOD = {"nbbo": _nbbo, "orders": _order}


def _scan_all(stream: str, data: bytes, chunks: list[int] | None = None):
    """Feed `data` in chunks the way the ingress does (pending tail kept); return good, bad."""
    sc = FrameScanner(stream)
    cuts = [0] + [int(c) for c in np.cumsum(chunks or []) if c < len(data)] + [len(data)]
    good: list[bytes] = []
    bad = []
    pending = b""
    for a, b in zip(cuts, cuts[1:]):
        buf = pending + data[a:b]
        final = b == len(data)
        res = sc.scan(buf, final=final)
        good += [row.tobytes() for row in res.payloads]
        bad += res.bad
        pending = buf[res.consumed:]
    assert pending == b""
    return good, bad


# ---------------------------------------------------------------- codec on the fixtures

def test_nbbo_fixture_decodes_and_reencodes(fixtures):
    data = (fixtures / DEMO / "1000nbbo-fixish.msg").read_bytes()
    msgs = [decode_payload(p) for p in iter_frames(data)]
    assert len(msgs) == 1000 and all(isinstance(m, Nbbo) for m in msgs)
    assert msgs[0].symbol == b"WETF"
    assert all(m.bid == m.offer for m in msgs)       # the 2017 demo data quotes bid == offer
    assert b"".join(encode_nbbo(m) for m in msgs) == data


def test_order_fixture_decodes_and_reencodes(fixtures):
    data = (fixtures / DEMO / "1000trades-fixish.msg").read_bytes()
    msgs = [decode_payload(p) for p in iter_frames(data)]
    assert len(msgs) == 1000 and all(isinstance(m, Order) for m in msgs)
    assert {m.side for m in msgs} <= {1, 2}
    assert b"".join(encode_order(m) for m in msgs) == data


@pytest.mark.parametrize("name,count", [("350-symbols_initial-nbbo-fixish.msg", 350),
                                        ("r3k-symbols_initial-nbbo-fixish.msg", 2926)])
def test_initial_nbbo_fixtures_scan_clean(fixtures, name, count):
    data = (fixtures / name).read_bytes()
    res = FrameScanner("nbbo").scan(data, final=True)
    assert res.payloads.shape == (count, NBBO_LEN) and res.bad == [] and res.consumed == len(data)
    assert [r.tobytes() for r in res.payloads] == list(iter_frames(data))


def test_result_round_trip():
    recs = [OrderResult(1, 7, b"ABCDEF", b"WETF", 10.0, 1.25, 1000.0, 1001.0, 123456789),
            OrderResult(2, 2**32 - 1, b"000001", b"   A", 0.5, 0.0, 0.0, 0.0, 2**63)]
    data = b"".join(encode_result(r) for r in recs)
    assert len(data) == 2 * 59 and HEADER.unpack_from(data)[0] == 55
    assert read_results(data) == recs


def test_decode_rejects_malformed():
    with pytest.raises(ValueError):
        decode_payload(b"")
    with pytest.raises(ValueError):
        decode_payload(b"\x02" + b"x" * 10)
    with pytest.raises(ValueError):
        list(iter_frames(_nbbo(1)[:-1]))


# ---------------------------------------------------------------- scanner

def test_scanner_fast_path_matches_fixture(fixtures):
    data = (fixtures / DEMO / "1000trades-fixish.msg").read_bytes()
    res = FrameScanner("orders").scan(data)
    assert res.payloads.shape == (1000, ORDER_LEN) and res.bad == [] and res.consumed == len(data)
    assert [r.tobytes() for r in res.payloads] == list(iter_frames(data))


BAD_CASES = {
    "wrong length": lambda s: frame(b"\x02" + b"\x55" * 50) if s == "nbbo" else frame(b"\x01" + b"\x55" * 40),
    "unknown type": lambda s: frame(b"\x07" + b"\x55" * (NBBO_LEN - 1 if s == "nbbo" else ORDER_LEN - 1)),
    "wrong stream": lambda s: _order(99) if s == "nbbo" else _nbbo(99),
    "oversized frame": lambda s: struct.pack(">I", 0xFFFFFFF0) + b"\x02\x55\x55\x55",
    "garbage bytes": lambda s: b"hello, not fixish at all \x00\x01\x02",
}
REASON_TEXT = {"wrong length": "wrong length", "unknown type": "unknown message type",
               "wrong stream": "on the wrong stream", "oversized frame": "oversized frame",
               "garbage bytes": ""}


@pytest.mark.parametrize("stream", ["nbbo", "orders"])
@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_scanner_sets_aside_bad_input_and_keeps_neighbours(stream, case):
    good = [GOOD[stream](i) for i in range(6)]
    bad = BAD_CASES[case](stream)
    data = b"".join(good[:3]) + bad + b"".join(good[3:])
    got, bad_frames = _scan_all(stream, data)
    assert got == [g[4:] for g in good]                         # all kept, in order
    assert b"".join(b.data for b in bad_frames) == bad           # exactly the bad bytes set aside
    assert REASON_TEXT[case] in bad_frames[0].reason


@pytest.mark.parametrize("stream", ["nbbo", "orders"])
def test_truncated_tail_is_reported_only_when_final(stream):
    good = [GOOD[stream](i) for i in range(3)]
    data = b"".join(good) + good[0][:20]
    sc = FrameScanner(stream)
    res = sc.scan(data)
    assert len(res.payloads) == 3 and res.bad == [] and res.consumed == 3 * len(good[0])
    res = sc.scan(data, final=True)
    assert [r.tobytes() for r in res.payloads] == [g[4:] for g in good]
    assert [(b.reason, b.data) for b in res.bad] == [("truncated frame", good[0][:20])]
    assert res.consumed == len(data)


def test_oversized_length_allocates_nothing_and_keeps_following_frames():
    good = [_nbbo(i) for i in range(2000)]
    data = good[0] + struct.pack(">I", 0xFFFFFFF0) + b"\x02" + b"\x00" * 37 + b"".join(good[1:])
    tracemalloc.start()
    t0 = time.perf_counter()
    got, bad = _scan_all("nbbo", data)
    elapsed = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert got == [g[4:] for g in good]
    assert len(bad) == 1 and bad[0].reason.startswith("oversized frame") and len(bad[0].data) == 42
    assert peak < 20 * len(data) and elapsed < 1.0


def test_garbage_between_many_good_frames_keeps_order():
    rng = np.random.default_rng(1)
    good = [_order(i) for i in range(300)]
    parts, junk = [], []
    for i, g in enumerate(good):
        parts.append(g)
        if i % 7 == 3:
            j = rng.integers(1, 256, size=int(rng.integers(1, 80)), dtype=np.uint8).tobytes()
            parts.append(j)
            junk.append(j)
    got, bad = _scan_all("orders", b"".join(parts))
    assert got == [g[4:] for g in good]
    assert b"".join(b.data for b in bad) == b"".join(junk)


def _mixed_stream(stream: str) -> tuple[bytes, list[bytes]]:
    good = [GOOD[stream](i) for i in range(12)]
    parts = []
    for i, g in enumerate(good):
        parts.append(g)
        parts.append(BAD_CASES[sorted(BAD_CASES)[i % len(BAD_CASES)]](stream) if i % 2 else b"")
    return b"".join(parts) + good[0][:7], [g[4:] for g in good]


@pytest.mark.parametrize("stream", ["nbbo", "orders"])
def test_incremental_feeding_byte_by_byte_equals_all_at_once(stream):
    data, expected = _mixed_stream(stream)
    whole, bad_whole = _scan_all(stream, data)
    single, bad_single = _scan_all(stream, data, [1] * len(data))
    assert whole == single == expected
    # however the bad runs are split, exactly the same bytes are set aside, in order
    assert b"".join(b.data for b in bad_whole) == b"".join(b.data for b in bad_single)
    assert bad_whole[-1].reason == bad_single[-1].reason == "truncated frame"


def test_header_split_across_two_scans():
    frames = [_nbbo(i) for i in range(4)]
    data = b"".join(frames)
    for cut in range(1, 2 * len(frames[0])):
        got, bad = _scan_all("nbbo", data, [cut])
        assert got == [f[4:] for f in frames] and bad == [], cut


def test_random_chunking_of_fixture(fixtures):
    data = (fixtures / DEMO / "1000nbbo-fixish.msg").read_bytes()
    rng = np.random.default_rng(7)
    chunks = list(rng.integers(1, 500, size=400))
    got, bad = _scan_all("nbbo", data, chunks)
    assert got == list(iter_frames(data)) and bad == []
