"""Symbols and shards of log records, as the tasks and the shard files compute them."""
from __future__ import annotations

import numpy as np
import pytest

from engine.wire.fixish import NBBO_FIELDS, NBBO_TYPE, ORDER_FIELDS, ORDER_TYPE
from engine.tools.generate import random_payloads
from engine.wire.records import EVENT_DTYPE, PAYLOAD_OFFSET, decode_events, record_symbols, shard_of


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


def test_decode_into_a_kept_buffer_equals_a_fresh_decode_and_overwrites_every_field():
    rec = np.zeros((300, 64), np.uint8)
    rec[:, :8] = np.arange(300, dtype="<i8").view(np.uint8).reshape(300, 8)
    rec[:, PAYLOAD_OFFSET:] = random_payloads(300, 50, seed=3)
    want = decode_events(rec, 1000)
    buf = np.empty(500, EVENT_DTYPE)
    buf.view(np.uint8)[:] = 0xAB                      # stale bytes of an earlier batch
    got = decode_events(rec, 1000, buf)
    assert np.shares_memory(got, buf) and len(got) == 300
    assert got.tobytes() == want.tobytes()
    assert decode_events(rec[:10], 7, buf).tobytes() == decode_events(rec[:10], 7).tobytes()
    with pytest.raises(ValueError, match="decode buffer"):
        decode_events(rec, 0, np.empty(299, EVENT_DTYPE))
    with pytest.raises(ValueError, match="decode buffer"):
        decode_events(rec, 0, np.empty(300, np.int64))
