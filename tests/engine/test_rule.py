"""The vectorised rule equals the plain-Python reference, however a stream is batched."""
from __future__ import annotations

import numpy as np
import pytest

from engine.wire.fixish import Nbbo, Order, iter_frames, decode_payload
from engine.rule import ShardState, apply_rule, is_wide, reference_results


def symbol_int(symbol: bytes) -> int:
    """Return the int form of a 4-byte symbol (as engine.formats.records reads it)."""
    return int.from_bytes(symbol, "big", signed=True)


def _random_stream(rng, n, n_symbols=20):
    syms = [f"S{i:03d}".encode() for i in range(n_symbols)]
    msgs = []
    for i in range(n):
        s = syms[rng.integers(n_symbols)]
        if rng.random() < 0.5:
            bid = float(rng.choice([0.0, 10.0, 100.0, 1000.0]))
            offer = bid + float(rng.choice([0.0, 0.01, 0.049, 0.05, 0.06, 1.0, 60.0]))
            msgs.append(Nbbo(s, b"20151204-14:30:00.000", bid, offer))
        else:
            msgs.append(Order(int(rng.integers(1, 3)), int(rng.integers(0, 2**32)),
                              f"{i:06d}".encode(), s, float(rng.integers(1, 1000)),
                              float(rng.random() * 100), b"20151204-14:30:00.000"))
    return msgs


def _columns(msgs):
    n = len(msgs)
    kind = np.array([2 if isinstance(m, Nbbo) else 1 for m in msgs], np.int8)
    sym = np.array([symbol_int(m.symbol) for m in msgs], np.int32)
    bid = np.array([m.bid if isinstance(m, Nbbo) else 0.0 for m in msgs])
    offer = np.array([m.offer if isinstance(m, Nbbo) else 0.0 for m in msgs])
    return np.arange(n, dtype=np.int64), kind, sym, bid, offer


def _run_batched(msgs, cuts, shuffle_rng=None, state=None):
    seq, kind, sym, bid, offer = _columns(msgs)
    state = ShardState.empty() if state is None else state
    out = []
    bounds = [0, *cuts, len(msgs)]
    for a, b in zip(bounds, bounds[1:]):
        idx = np.arange(a, b)
        if shuffle_rng is not None:      # Spark gives a group's rows in no order
            shuffle_rng.shuffle(idx)
        r = apply_rule(state, seq[idx], kind[idx], sym[idx], bid[idx], offer[idx])
        state = ShardState.from_bytes(*r.state.to_bytes())
        for row, b_, o_ in zip(idx[r.rows], r.bid, r.offer):
            m = msgs[row]
            out.append((m.side, m.account, m.order_id, m.symbol, m.qty, m.price, float(b_), float(o_)))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_vectorised_rule_equals_reference_under_any_batching(seed):
    rng = np.random.default_rng(seed)
    msgs = _random_stream(rng, 3000)
    want = reference_results(msgs)
    assert want, "stream should produce rejections"
    cuts = sorted(rng.choice(np.arange(1, len(msgs)), size=int(rng.integers(0, 12)), replace=False))
    assert _run_batched(msgs, list(cuts), shuffle_rng=rng) == want


@pytest.mark.parametrize("seed", range(4))
def test_batches_in_log_order_equal_reference(seed):
    """A batch read from the log comes in seq order (the rule's fast path: no sort by seq)."""
    rng = np.random.default_rng(100 + seed)
    msgs = _random_stream(rng, 3000)
    cuts = sorted(rng.choice(np.arange(1, len(msgs)), size=int(rng.integers(0, 12)), replace=False))
    assert _run_batched(msgs, list(cuts)) == reference_results(msgs)


def test_more_symbols_than_a_16_bit_sort_key_holds():
    """Past 65,536 symbols in a shard's state the sort key widens; results stay exact."""
    rng = np.random.default_rng(7)
    msgs = _random_stream(rng, 3000)
    others = np.arange(1, 70_001, dtype=np.int32)          # symbols no message uses, all quoted tight
    big = ShardState(others, np.zeros(len(others), bool), np.full(len(others), 10.0), np.full(len(others), 10.01))
    assert _run_batched(msgs, [1000, 2000], state=big) == reference_results(msgs)
    assert _run_batched(msgs, [1500], shuffle_rng=rng, state=big) == reference_results(msgs)


def test_unquoted_symbol_is_rejected_with_zero_quotes():
    msgs = [Order(1, 7, b"abcdef", b"NEW ", 10.0, 1.5, b"t")]
    assert _run_batched(msgs, []) == [(1, 7, b"abcdef", b"NEW ", 10.0, 1.5, 0.0, 0.0)]


def test_wide_and_tight_boundaries():
    assert bool(is_wide(100.0, 100.06)) and not bool(is_wide(100.0, 100.04))
    assert bool(is_wide(0.5, 0.53)) and not bool(is_wide(1.0, 1.049))   # relative: 0.03/0.515, 0.049/1.0245
    assert not bool(is_wide(0.0, 0.0))


def test_rule_on_wallaroo_demo_fixtures(fixtures):
    data = b"".join((fixtures / f).read_bytes() for f in
                    ("350-symbols_initial-nbbo-fixish.msg", "demo-2017/1000nbbo-fixish.msg",
                     "demo-2017/1000trades-fixish.msg"))
    msgs = [decode_payload(p) for p in iter_frames(data)]
    want = reference_results(msgs)
    assert len(msgs) == 350 + 2000 and len(want) > 0
    assert _run_batched(msgs, [100, 351, 1500, 2000]) == want


def test_symbols_sharing_a_hash_slot_new_ones_and_zero_keep_their_own_state():
    """Thousands of symbols (some share a slot of the rule's symbol table), symbol 0 and
    negative ones, new symbols in every batch, a state from bytes or kept: all exact."""
    rng = np.random.default_rng(11)
    pool = np.unique(np.concatenate([rng.integers(-2**31, 2**31, 5000), [0, -1, 1]]).astype(np.int32))
    n = 40_000
    sym = pool[rng.integers(0, len(pool), n)]
    kind = rng.choice(np.array([1, 2], np.int8), n)
    bid = rng.choice([10.0, 100.0], n)
    offer = bid + rng.choice([0.01, 1.0], n)
    msgs = [Nbbo(int(s).to_bytes(4, "big", signed=True), b"t" * 21, b_, o_) if k == 2 else
            Order(1, i, f"{i:06d}".encode(), int(s).to_bytes(4, "big", signed=True), 1.0, 2.0, b"t" * 21)
            for i, (s, k, b_, o_) in enumerate(zip(sym, kind, bid, offer))]
    want = reference_results(msgs)
    for from_bytes in (True, False):
        state, got = ShardState.empty(), []
        for a, b in zip(range(0, n, 7000), range(7000, n + 7000, 7000)):
            r = apply_rule(state, np.arange(a, min(b, n)), kind[a:b], sym[a:b], bid[a:b], offer[a:b])
            state = ShardState.from_bytes(*r.state.to_bytes()) if from_bytes else r.state
            for row, b_, o_ in zip(r.rows + a, r.bid, r.offer):
                m = msgs[row]
                got.append((m.side, m.account, m.order_id, m.symbol, m.qty, m.price, float(b_), float(o_)))
        assert got == want
        assert np.array_equal(state.symbols, np.unique(sym))


TINY = 5e-324                          # the smallest subnormal: a mid of -TINY/2 rounds to -0.0


@pytest.mark.parametrize("bid, offer", [(-TINY, 0.0), (0.0, -TINY), (-TINY, -0.0), (-0.0, -TINY),
                                        (TINY, 0.0), (0.0, TINY), (-0.0, 0.0), (0.0, -0.0), (-TINY, TINY)])
def test_negative_subnormal_quotes_agree_with_the_reference(bid, offer):
    """A mid that rounds to -0.0 keeps its sign: the relative spread's sign follows IEEE division."""
    msgs = [Nbbo(b"SUB ", b"t", bid, offer), Order(1, 7, b"abcdef", b"SUB ", 10.0, 1.5, b"t")]
    assert _run_batched(msgs, []) == reference_results(msgs)
