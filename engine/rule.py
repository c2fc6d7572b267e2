"""The Market Spread rule (Wallaroo's market-spread): pure logic, no I/O, no Spark.

State per symbol starts as "reject, bid 0, offer 0". An NBBO sets bid and offer and
`reject = offer - bid >= 0.05 or (offer - bid) / mid >= 0.05`; an order is emitted as a
rejected-order result when its symbol's state says reject.

`apply_rule` does this for a whole batch of one shard in numpy; `reference_results` is
the plain-Python loop the tests hold it to. Both divide as IEEE does, also by a mid of
±0.0 (negative subnormal quotes round to -0.0): the sign of the infinity decides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from engine.wire.fixish import NBBO_TYPE, ORDER_TYPE, Nbbo, Order

WIDE_ABS = 0.05
WIDE_REL = 0.05


def is_wide(bid, offer):
    """Return Wallaroo's reject flag for quotes (scalars or arrays); 0/0 counts as tight."""
    bid = np.asarray(bid, dtype=np.float64)
    offer = np.asarray(offer, dtype=np.float64)
    diff = offer - bid
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / ((bid + offer) / 2.0)
    return (diff >= WIDE_ABS) | (rel >= WIDE_REL)


@dataclass(frozen=True)
class ShardState:
    """State of all symbols of one shard: sorted symbol ints and parallel arrays."""
    symbols: np.ndarray   # int32, sorted
    reject: np.ndarray    # bool
    bid: np.ndarray       # float64
    offer: np.ndarray     # float64

    @classmethod
    def empty(cls) -> "ShardState":
        return cls(np.empty(0, np.int32), np.empty(0, bool), np.empty(0), np.empty(0))

    def to_bytes(self) -> tuple[bytes, bytes, bytes, bytes]:
        """Serialise for a Spark state row."""
        return (self.symbols.astype("<i4").tobytes(), self.reject.astype(np.uint8).tobytes(),
                self.bid.astype("<f8").tobytes(), self.offer.astype("<f8").tobytes())

    @classmethod
    def from_bytes(cls, symbols: bytes, reject: bytes, bid: bytes, offer: bytes) -> "ShardState":
        return cls(np.frombuffer(symbols, "<i4").astype(np.int32),
                   np.frombuffer(reject, np.uint8).astype(bool),
                   np.frombuffer(bid, "<f8").copy(), np.frombuffer(offer, "<f8").copy())


@dataclass(frozen=True)
class RuleOutput:
    """Rejected orders of a batch (row indices into the batch, in seq order) and new state."""
    rows: np.ndarray      # int64 indices of rejected orders in the input batch
    bid: np.ndarray       # the symbol's last bid for each rejected order
    offer: np.ndarray
    state: ShardState


_HASH = np.uint32(2654435761)          # Knuth's multiplicative hash, as in records.shard_of


@dataclass(frozen=True)
class _SymbolIndex:
    """A hash table from symbol ints to rows of a state's sorted `symbols`.

    One multiply, one shift and two gathers per event: a batch's `np.unique` with its
    inverse (a sort of 500,000 int32) cost ~15-20 ms, this ~5 ms. A symbol that shares
    its slot with another (~3 % of them at 16 slots per symbol), or is new to the state,
    is looked up by binary search instead.
    """
    symbols: np.ndarray   # the state's, the table was built from (identity: the cache key)
    shift: np.uint32
    slot_symbol: np.ndarray
    slot_row: np.ndarray  # -1: empty slot

    @classmethod
    def build(cls, symbols: np.ndarray) -> "_SymbolIndex":
        bits = max(10, int(len(symbols) * 16 - 1).bit_length())   # ~3 % of symbols share a slot
        shift = np.uint32(32 - bits)
        slot_row = np.full(1 << bits, -1, np.int32)
        slot_row[cls._slots(symbols, shift)] = np.arange(len(symbols))   # of symbols sharing a slot, one keeps it
        slot_symbol = np.zeros(1 << bits, np.int32)
        taken = slot_row >= 0
        slot_symbol[taken] = symbols[slot_row[taken]]
        return cls(symbols, shift, slot_symbol, slot_row)

    @staticmethod
    def _slots(symbols: np.ndarray, shift: np.uint32) -> np.ndarray:
        return (symbols.astype(np.uint32) * _HASH) >> shift

    def rows(self, symbols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each symbol's row in the state (-1: not in it), and the indices of those not in it."""
        slots = self._slots(symbols, self.shift)
        rows = self.slot_row[slots]
        miss = np.flatnonzero((self.slot_symbol[slots] != symbols) | (rows < 0))
        if not len(miss) or not len(self.symbols):
            return rows, miss
        wanted = symbols[miss]            # lost their slot to another symbol, or new
        at = np.minimum(np.searchsorted(self.symbols, wanted), len(self.symbols) - 1)
        found = self.symbols[at] == wanted
        rows[miss] = np.where(found, at, -1)
        return rows, miss[~found]


_index_cache: list[_SymbolIndex] = []  # the last state's index: a shard's next batch reuses it


def _symbol_index(symbols: np.ndarray) -> _SymbolIndex:
    if _index_cache and _index_cache[0].symbols is symbols:
        return _index_cache[0]
    index = _SymbolIndex.build(symbols)
    _index_cache[:] = [index]
    return index


def _extend(state: ShardState, symbols: np.ndarray) -> tuple[ShardState, np.ndarray]:
    """Add unseen symbols (reject, 0, 0); return the state and each event's row in it."""
    rows, unknown = _symbol_index(state.symbols).rows(symbols)
    if not len(unknown):
        return state, rows
    unseen = symbols[unknown]
    all_syms = np.union1d(state.symbols, unseen).astype(np.int32)
    where = np.searchsorted(all_syms, state.symbols)
    reject = np.ones(len(all_syms), bool)
    bid = np.zeros(len(all_syms))
    offer = np.zeros(len(all_syms))
    reject[where], bid[where], offer[where] = state.reject, state.bid, state.offer
    known = np.flatnonzero(rows >= 0)
    rows[known] = where[rows[known]]
    rows[unknown] = np.searchsorted(all_syms, unseen)
    return ShardState(all_syms, reject, bid, offer), rows


def apply_rule(state: ShardState, seq: np.ndarray, kind: np.ndarray, symbol: np.ndarray,
               bid: np.ndarray, offer: np.ndarray) -> RuleOutput:
    """Apply the rule to one shard's batch, events in any order (sorted here by `seq`)."""
    n = len(seq)
    if n == 0:
        return RuleOutput(np.empty(0, np.int64), np.empty(0), np.empty(0), state)
    state, sym_idx = _extend(state, symbol)
    # Group by symbol, keeping arrival order inside each group. A batch read from the log is
    # in seq order already; the symbol index as a narrow unsigned int sorts by radix
    # (stable), ~15x faster than a merge sort of int64 at 500k events.
    key = sym_idx.astype(np.uint16 if len(state.symbols) <= 1 << 16 else np.uint32)
    in_seq_order = bool(np.all(seq[1:] > seq[:-1]))
    if in_seq_order:
        order = np.argsort(key, kind="stable")
    else:
        by_seq = np.argsort(seq, kind="stable")
        order = by_seq[np.argsort(key[by_seq], kind="stable")]
    g = sym_idx[order]
    kinds = kind[order]
    pos = np.arange(n)
    starts = np.empty(n, bool)
    starts[0] = True
    starts[1:] = g[1:] != g[:-1]
    group_start = np.maximum.accumulate(np.where(starts, pos, 0))
    last_nbbo = np.maximum.accumulate(np.where(kinds == NBBO_TYPE, pos, -1))
    ends = np.empty(n, bool)
    ends[-1] = True
    ends[:-1] = starts[1:]
    # Only orders (emitted or not) and each symbol's last row need the quote in effect:
    # for a quote-heavy batch, a few thousand rows instead of every row.
    is_order = kinds == ORDER_TYPE
    sel = np.flatnonzero(is_order | ends)
    g, is_order, ends = g[sel], is_order[sel], ends[sel]
    has_quote = last_nbbo[sel] >= group_start[sel]
    quote = order[np.where(has_quote, last_nbbo[sel], 0)]
    q_bid, q_offer = bid[quote], offer[quote]
    q_wide = is_wide(q_bid, q_offer)
    eff_reject = np.where(has_quote, q_wide, state.reject[g])
    # Indices, not masks, from here on: a batch rejects a few orders in ten, and each
    # boolean mask over the selected rows costs a pass over all of them.
    emit = np.flatnonzero(is_order & eff_reject)
    # New state: each symbol's last row decides (its last quote, if any in this batch).
    upd = np.flatnonzero(ends & has_quote)
    reject, new_bid, new_offer = state.reject.copy(), state.bid.copy(), state.offer.copy()
    reject[g[upd]] = q_wide[upd]
    new_bid[g[upd]] = q_bid[upd]
    new_offer[g[upd]] = q_offer[upd]
    rows = order[sel[emit]]
    if in_seq_order:
        # Row indices are then seq order: put them back in order by marking them (O(n)),
        # not by sorting (27 ms for 500k rejected orders).
        rank = np.empty(n, np.int64)
        rank[rows] = np.arange(len(rows))
        mark = np.zeros(n, bool)
        mark[rows] = True
        back = emit[rank[mark]]
    else:
        back = emit[np.argsort(seq[rows], kind="stable")]
    quoted, g_back = has_quote[back], g[back]
    eff_bid = np.where(quoted, q_bid[back], state.bid[g_back])
    eff_offer = np.where(quoted, q_offer[back], state.offer[g_back])
    return RuleOutput(order[sel[back]].astype(np.int64), eff_bid, eff_offer,
                      ShardState(state.symbols, reject, new_bid, new_offer))


def _by_zero_is_wide(diff: float, mid: float) -> bool:
    """`diff / mid >= WIDE_REL` for a mid of ±0.0, as IEEE division (numpy, Wallaroo's F64) gives it.

    ±inf by the signs of both: a mid of negative subnormals rounds to -0.0 and keeps its
    sign, so a positive spread over it is -inf (tight); 0/0 is nan (tight).
    """
    if diff == 0:
        return False
    return (diff > 0) == (math.copysign(1.0, mid) > 0)


def reference_results(messages: Iterable[Nbbo | Order]) -> list[tuple]:
    """Run the rule in plain Python over messages in arrival order.

    Returns result tuples (side, account, order_id, symbol, qty, price, bid, offer),
    i.e. Wallaroo's OrderResult without its timestamp.
    """
    state: dict[bytes, tuple[bool, float, float]] = {}
    out = []
    for m in messages:
        if isinstance(m, Nbbo):
            diff = m.offer - m.bid
            mid = (m.bid + m.offer) / 2
            rel_wide = (diff / mid >= WIDE_REL) if mid != 0 else _by_zero_is_wide(diff, mid)
            state[m.symbol] = (diff >= WIDE_ABS or rel_wide, m.bid, m.offer)
        else:
            reject, b, o = state.get(m.symbol, (True, 0.0, 0.0))
            if reject:
                out.append((m.side, m.account, m.order_id, m.symbol, m.qty, m.price, b, o))
    return out
