"""Symbols and shards of log records, as the tasks and the shard files compute them."""
from __future__ import annotations

import numpy as np

from engine.wire.fixish import NBBO_FIELDS, NBBO_TYPE, ORDER_FIELDS, ORDER_TYPE
from engine.formats.records import PAYLOAD_OFFSET, record_symbols, shard_of


def test_shard_of_is_the_low_32_bits_of_the_uint64_product():
    sym = np.random.default_rng(3).integers(-2**31, 2**31, 100_000).astype(np.int32)
    for n in (1, 2, 3, 4, 7, 64, 1000):
        h = (sym.astype(np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
        assert np.array_equal(shard_of(sym, n), ((h >> np.uint64(16)) % np.uint64(n)).astype(np.int32))


def test_record_symbols_reads_the_field_the_type_names_also_from_rows_apart():
    rng = np.random.default_rng(4)
    rec = rng.integers(0, 256, (1000, 64), dtype=np.uint8)
    rec[:, PAYLOAD_OFFSET] = rng.choice([NBBO_TYPE, ORDER_TYPE, 0, 200], 1000)
    at = {NBBO_TYPE: NBBO_FIELDS["symbol"], ORDER_TYPE: ORDER_FIELDS["symbol"]}
    want = [int.from_bytes(r[PAYLOAD_OFFSET + at.get(int(r[PAYLOAD_OFFSET]), NBBO_FIELDS["symbol"]):][:4].tobytes(),
                           "big", signed=True) for r in rec]
    assert record_symbols(rec).tolist() == want
    apart = np.zeros((1000, 72), np.uint8)              # a shard file's layout: seq, then the record
    apart[:, 8:] = rec
    assert record_symbols(apart[:, 8:]).tolist() == want
    assert record_symbols(rec[:0]).tolist() == []


def test_event_columns_equal_the_full_decode_also_from_rows_apart():
    """The rule's columns read in place equal each record's bytes read one by one, for
    either record type; `decode_events` carries the same fields."""
    import struct
    from engine.formats.records import decode_events, event_columns
    rng = np.random.default_rng(5)
    rec = rng.integers(0, 256, (2000, 64), dtype=np.uint8)
    rec[:, PAYLOAD_OFFSET] = rng.choice([NBBO_TYPE, ORDER_TYPE], 2000)
    finite = rng.random((2000, 2)) * 1000             # random bytes would give NaNs, which never compare equal
    want = {name: [] for name in ("seq", "ingest_ns", "kind", "symbol", "a", "b")}
    for row, (x, y) in enumerate(finite):
        kind = int(rec[row, PAYLOAD_OFFSET])
        where = NBBO_FIELDS if kind == NBBO_TYPE else ORDER_FIELDS
        fields = ("bid", "offer") if kind == NBBO_TYPE else ("qty", "price")
        for name, value in zip(fields, (x, y)):
            at = PAYLOAD_OFFSET + where[name]
            rec[row, at:at + 8] = np.frombuffer(struct.pack(">d", value), np.uint8)
        raw = rec[row].tobytes()
        at = PAYLOAD_OFFSET + where["symbol"]
        want["seq"].append(100 + row)
        want["ingest_ns"].append(struct.unpack_from("<q", raw, 0)[0])
        want["kind"].append(kind)
        want["symbol"].append(struct.unpack_from(">i", raw, at)[0])
        want["a"].append(x)
        want["b"].append(y)
    apart = np.zeros((2000, 72), np.uint8)
    apart[:, 8:] = rec
    full = decode_events(rec, 100)
    for got in (event_columns(rec, 100), event_columns(apart[:, 8:], np.arange(100, 2100)), full):
        assert len(got) == 2000
        for name, values in want.items():
            assert got[name].tolist() == values, name
    cols = event_columns(rec, 100)
    assert all(cols[name].flags.c_contiguous for name in want)
    assert len(event_columns(rec[:0], 0)) == 0
