"""Synthetic NBBO and order files (framed fixish), deterministic from a seed.

Messages are built as numpy structured arrays whose big-endian layout *is* the wire
format, so a million messages cost one `.tobytes()` rather than a million
`struct.pack` calls. Each symbol is either always wide (every order for it is
rejected) or always tight (never rejected), which makes the expected output of a run
easy to reason about.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.wire.fixish import NBBO_FIELDS, NBBO_LEN, NBBO_TYPE, ORDER_FIELDS, ORDER_LEN, ORDER_TYPE, OrderResult, encode_result, pad_symbol

NBBO_FRAME = np.dtype([("len", ">u4"), ("type", "u1"), ("symbol", "S4"), ("time", "S21"),
                       ("bid", ">f8"), ("offer", ">f8")])
ORDER_FRAME = np.dtype([("len", ">u4"), ("type", "u1"), ("side", "u1"), ("account", ">u4"),
                        ("order_id", "S6"), ("symbol", "S4"), ("qty", ">f8"), ("price", ">f8"),
                        ("time", "S21")])
assert NBBO_FRAME.itemsize == 4 + NBBO_LEN and ORDER_FRAME.itemsize == 4 + ORDER_LEN

CHUNK = 1_000_000                      # messages built per step: bounds memory, paces progress
START = np.datetime64("2015-12-04T09:30:00.000", "ms")   # the day of Wallaroo's fixtures
_LETTERS = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)
_ALNUM = np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", np.uint8)
# Ticker lengths 1..4 in the proportions of Wallaroo's 350-symbol list (8, 38, 191, 113).
_LEN_WEIGHTS = np.array([8, 38, 191, 113]) / 350
_ID_SPACE = 62 ** 6
# Odd and not multiples of 31, so x -> x*step mod 62**6 is a bijection; small enough not to overflow u64.
_ID_STEP, _ID_STEP2 = 316_227_757, 270_566_473
_POW62 = np.uint64(62) ** np.arange(5, -1, -1, dtype=np.uint64)

# Wallaroo's integration test (testing/performance/apps/market-spread/_test/gen.py).
WALLAROO_WIDE = [pad_symbol(s) for s in "AA BAC AAPL FCX SUNE FB RAD INTC GE WMB".split()]
WALLAROO_TIGHT = [pad_symbol(s) for s in "S ATML YHOO F T MU PFE CSCO MEG HUN".split()]


@dataclass(frozen=True)
class GenerateReport:
    """What `generate` wrote: message counts and which symbols quote wide."""
    nbbo: int                          # NBBO messages, initial quotes included
    orders: int
    symbols: int
    wide_symbols: tuple[bytes, ...]    # in the order of the symbol list


def read_symbols(path: Path) -> list[bytes]:
    """Read a symbols file, one per line, padded or not (Wallaroo has both kinds)."""
    lines = Path(path).read_text("ascii").splitlines()
    return [pad_symbol(s.strip()) for s in lines if s.strip()]


def make_symbols(n: int, rng: np.random.Generator) -> list[bytes]:
    """Return `n` distinct made-up upper-case tickers of 1-4 letters, left-padded to 4 bytes."""
    caps = 26 ** np.arange(1, 5)
    if n > caps.sum():
        raise ValueError(f"at most {caps.sum()} distinct tickers of 1-4 letters, asked for {n}")
    take = np.minimum(rng.multinomial(n, _LEN_WEIGHTS), caps)
    for i in (3, 2, 1, 0):             # spill what short lengths cannot hold to longer ones
        take[i] += min(n - take.sum(), caps[i] - take[i])
    out: list[bytes] = []
    for length, k in zip(range(1, 5), take):
        idx = rng.choice(caps[length - 1], size=int(k), replace=False)
        digits = (idx[:, None] // 26 ** np.arange(length - 1, -1, -1)) % 26
        letters = np.full((len(idx), 4), ord(" "), np.uint8)
        letters[:, 4 - length:] = _LETTERS[digits]
        out += letters.view("S4").ravel().tolist()
    return [out[i] for i in rng.permutation(n)]


def format_times(ms: np.ndarray) -> np.ndarray:
    """Format epoch milliseconds as fixish `YYYYMMDD-HH:MM:SS.mmm` (dtype S21)."""
    t = np.asarray(ms, dtype="datetime64[ms]")
    days = t.astype("datetime64[D]")
    months = t.astype("datetime64[M]")
    years = t.astype("datetime64[Y]")
    tod = (t - days).astype(np.int64)
    fields = [(years.astype(np.int64) + 1970, 4), ((months - years).astype(np.int64) + 1, 2),
              ((days - months).astype(np.int64) + 1, 2), (None, "-"), (tod // 3_600_000, 2),
              (None, ":"), (tod // 60_000 % 60, 2), (None, ":"), (tod // 1000 % 60, 2),
              (None, "."), (tod % 1000, 3)]
    out = np.empty((len(t), 21), np.uint8)
    col = 0
    for value, width in fields:
        if value is None:
            out[:, col] = ord(width)
            col += 1
            continue
        for k in range(width):
            out[:, col] = value // 10 ** (width - 1 - k) % 10 + ord("0")
            col += 1
    return out.view("S21").ravel()


def nbbo_frames(symbol: np.ndarray, time: np.ndarray, bid: np.ndarray, offer: np.ndarray) -> np.ndarray:
    """Build framed NBBO messages as a structured array (`.tobytes()` is the wire)."""
    a = np.empty(len(bid), NBBO_FRAME)
    a["len"], a["type"] = NBBO_LEN, NBBO_TYPE
    a["symbol"], a["time"], a["bid"], a["offer"] = symbol, time, bid, offer
    return a


def order_frames(side, account, order_id, symbol, qty, price, time) -> np.ndarray:
    """Build framed order messages as a structured array (`.tobytes()` is the wire)."""
    a = np.empty(len(side), ORDER_FRAME)
    a["len"], a["type"] = ORDER_LEN, ORDER_TYPE
    a["side"], a["account"], a["order_id"], a["symbol"] = side, account, order_id, symbol
    a["qty"], a["price"], a["time"] = qty, price, time
    return a


def _base62(x: np.ndarray) -> np.ndarray:
    """Return the 6 base-62 digits of each value, most significant first."""
    return (x[:, None] // _POW62) % np.uint64(62)


def _order_ids(start: int, n: int, key: int) -> np.ndarray:
    """Distinct, random-looking 6-character alphanumeric ids for orders start..start+n.

    Two affine maps mod 62**6 around a digit reversal: each step is a bijection, so ids
    never repeat (unlike random draws), and the reversal hides the affine maps' patterns.
    """
    m = np.uint64(_ID_SPACE)
    i = np.arange(start, start + n, dtype=np.uint64) % m
    x = (i * np.uint64(_ID_STEP) + np.uint64(key)) % m
    x = (_base62(x)[:, ::-1] * _POW62).sum(axis=1, dtype=np.uint64)
    x = (x * np.uint64(_ID_STEP2) + np.uint64(key)) % m
    return _ALNUM[_base62(x).astype(np.intp)].view("S6").ravel()


class _Clock:
    """A per-file transaction clock that moves 0-2 ms per message."""

    def __init__(self, start: np.datetime64 = START):
        self.last = start.astype(np.int64)

    def next(self, rng: np.random.Generator, n: int) -> np.ndarray:
        ms = self.last + np.cumsum(rng.integers(0, 3, n))
        if n:
            self.last = int(ms[-1])
        return format_times(ms)


def _quotes(rng: np.random.Generator, sym_idx: np.ndarray, base: np.ndarray, wide: np.ndarray):
    """Return (bid, offer) arrays: cents prices near each symbol's base, spread by its class."""
    bid = np.maximum(np.round(base[sym_idx] * (1 + 0.002 * rng.standard_normal(len(sym_idx))), 2), 1.0)
    # Tight: 0-3 cents (diff < 0.05, and diff/mid <= 3 % at bid >= 1); wide: 10 cents to 1 dollar,
    # far enough from the 5-cent threshold that float rounding cannot flip either class.
    cents = np.where(wide[sym_idx], rng.integers(10, 101, len(sym_idx)), rng.integers(0, 4, len(sym_idx)))
    return bid, np.round(bid + cents / 100, 2)


def _progress(done: int, total: int) -> None:
    print(f"generate: {done:,}/{total:,} messages", file=sys.stderr, flush=True)


def generate(out_nbbo: Path, out_orders: Path, symbols: int | list[bytes] = 350, nbbo: int = 100_000,
             orders: int = 100_000, wide_share: float = 0.1, seed: int = 0,
             initial: bool = True) -> GenerateReport:
    """Write `nbbo` random NBBOs and `orders` random orders; with `initial`, one quote per symbol first.

    A share `wide_share` of the symbols always quotes wide, the rest always tight, so the
    orders of wide symbols are exactly the rejected ones once every symbol was quoted.
    """
    rng = np.random.default_rng(seed)
    syms = make_symbols(symbols, rng) if isinstance(symbols, int) else [pad_symbol(s) for s in symbols]
    if not syms or len(set(syms)) != len(syms):
        raise ValueError("need a non-empty list of distinct symbols")
    if not 0.0 <= wide_share <= 1.0:
        raise ValueError(f"wide_share must be within [0, 1], got {wide_share}")
    n_sym = len(syms)
    sym_arr = np.array(syms, dtype="S4")
    wide = np.zeros(n_sym, bool)
    wide[rng.choice(n_sym, size=round(wide_share * n_sym), replace=False)] = True
    base = np.round(np.exp(rng.uniform(np.log(5.0), np.log(500.0), n_sym)), 2)
    id_offset = int(rng.integers(0, _ID_SPACE))

    n_initial = n_sym if initial else 0
    total = n_initial + nbbo + orders
    done = 0
    Path(out_nbbo).parent.mkdir(parents=True, exist_ok=True)
    Path(out_orders).parent.mkdir(parents=True, exist_ok=True)
    with open(out_nbbo, "wb") as f:
        clock = _Clock()
        if initial:
            idx = np.arange(n_sym)
            bid, offer = _quotes(rng, idx, base, wide)
            f.write(nbbo_frames(sym_arr, clock.next(rng, n_sym), bid, offer).tobytes())
            done += n_sym
        for start in range(0, nbbo, CHUNK):
            n = min(CHUNK, nbbo - start)
            idx = rng.integers(0, n_sym, n)
            bid, offer = _quotes(rng, idx, base, wide)
            f.write(nbbo_frames(sym_arr[idx], clock.next(rng, n), bid, offer).tobytes())
            done += n
            if total >= CHUNK:
                _progress(done, total)
    with open(out_orders, "wb") as f:
        clock = _Clock()
        for start in range(0, orders, CHUNK):
            n = min(CHUNK, orders - start)
            idx = rng.integers(0, n_sym, n)
            price = np.maximum(np.round(base[idx] * (1 + 0.002 * rng.standard_normal(n)), 2), 0.01)
            f.write(order_frames(rng.integers(1, 3, n), rng.integers(0, 2 ** 32, n, dtype=np.uint32),
                                 _order_ids(start, n, id_offset), sym_arr[idx],
                                 rng.integers(1, 100, n) * 100.0, price, clock.next(rng, n)).tobytes())
            done += n
            if total >= CHUNK:
                _progress(done, total)
    return GenerateReport(n_initial + nbbo, orders, n_sym, tuple(s for s, w in zip(syms, wide) if w))


def wallaroo_scenario(out_nbbo: Path, out_orders: Path, seed: int = 0) -> list[tuple]:
    """Write Wallaroo's integration-test input; return the expected results without timestamp.

    1000 NBBOs over 10 tight symbols (bid 1000, offer 1000 + random() * 0.05), then 1000
    over 10 wide ones (bid 1000, offer 1001); 1000 orders for quoted tight symbols, then
    1000 for quoted wide ones. Expected: the wide group's orders, as tuples
    (side, account, order_id, symbol, qty, price, bid, offer).
    """
    rng = np.random.default_rng(seed)
    n = 1000
    tight_idx, wide_idx = rng.integers(0, 10, n), rng.integers(0, 10, n)
    tight_offer = 1000.0 + rng.random(n) * 0.05
    # 1000 + r*0.05 can round up to a double whose distance from 1000 is >= 0.05 (wide).
    while (bad := tight_offer - 1000.0 >= 0.05).any():
        tight_offer[bad] = np.nextafter(tight_offer[bad], 0.0)
    tight, wide = np.array(WALLAROO_TIGHT, "S4"), np.array(WALLAROO_WIDE, "S4")
    clock = _Clock()
    quotes = [nbbo_frames(tight[tight_idx], clock.next(rng, n), np.full(n, 1000.0), tight_offer),
              nbbo_frames(wide[wide_idx], clock.next(rng, n), np.full(n, 1000.0), np.full(n, 1001.0))]
    clock = _Clock()
    groups = []
    for g, (names, idx) in enumerate(((tight, tight_idx), (wide, wide_idx))):
        quoted = names[np.unique(idx)]           # Wallaroo orders only symbols it quoted
        ids = np.array([f"{i:06d}".encode() for i in range(g * n + 1, g * n + n + 1)], "S6")
        groups.append(order_frames(rng.integers(1, 3, n), rng.integers(1, 11, n), ids,
                                   quoted[rng.integers(0, len(quoted), n)], np.full(n, 1000.0),
                                   np.full(n, 10.0), clock.next(rng, n)))
    Path(out_nbbo).parent.mkdir(parents=True, exist_ok=True)
    Path(out_orders).parent.mkdir(parents=True, exist_ok=True)
    Path(out_nbbo).write_bytes(b"".join(q.tobytes() for q in quotes))
    Path(out_orders).write_bytes(b"".join(o.tobytes() for o in groups))
    # Every quote of a wide symbol is 1000/1001, so that is each rejected order's last quote.
    return [(int(o["side"]), int(o["account"]), bytes(o["order_id"]), bytes(o["symbol"]),
             float(o["qty"]), float(o["price"]), 1000.0, 1001.0) for o in groups[1]]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `generate` command's flags."""
    parser.add_argument("--out-nbbo", type=Path, required=True, help="NBBO file to write")
    parser.add_argument("--out-orders", type=Path, required=True, help="orders file to write")
    parser.add_argument("--symbols", type=int, default=350, help="made-up symbols (default 350)")
    parser.add_argument("--symbols-file", type=Path, help="symbols, one per line (overrides --symbols)")
    parser.add_argument("--nbbo", type=int, default=100_000, help="NBBO messages after the initial quotes")
    parser.add_argument("--orders", type=int, default=100_000, help="order messages")
    parser.add_argument("--wide-share", type=float, default=0.1, help="share of always-wide symbols")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-initial", dest="initial", action="store_false",
                        help="do not start the NBBO file with one quote per symbol")
    parser.add_argument("--wallaroo-scenario", action="store_true",
                        help="write Wallaroo's integration-test input instead (ignores the sizes)")
    parser.add_argument("--out-expected", type=Path,
                        help="with --wallaroo-scenario: write the expected results (timestamp 0)")


def run(args: argparse.Namespace) -> int:
    """Run the `generate` command."""
    if args.wallaroo_scenario:
        expected = wallaroo_scenario(args.out_nbbo, args.out_orders, seed=args.seed)
        if args.out_expected:
            args.out_expected.write_bytes(b"".join(encode_result(OrderResult(*e, 0)) for e in expected))
        print(f"generate: Wallaroo scenario: 2,000 NBBO -> {args.out_nbbo}, 2,000 orders -> "
              f"{args.out_orders}, {len(expected):,} expected results", file=sys.stderr)
        return 0
    symbols = read_symbols(args.symbols_file) if args.symbols_file else args.symbols
    rep = generate(args.out_nbbo, args.out_orders, symbols=symbols, nbbo=args.nbbo, orders=args.orders,
                   wide_share=args.wide_share, seed=args.seed, initial=args.initial)
    print(f"generate: {rep.nbbo:,} NBBO -> {args.out_nbbo}, {rep.orders:,} orders -> {args.out_orders}; "
          f"{len(rep.wide_symbols)} of {rep.symbols} symbols wide", file=sys.stderr)
    return 0


def random_payloads(n: int, symbols: int, seed: int, kinds=(NBBO_TYPE, ORDER_TYPE)) -> np.ndarray:
    """`n` 56-byte log payloads of random bytes with a type from `kinds` and a real symbol field.

    For tests and benchmarks of what reads only a record's type and symbol (the shard
    split): the other fields are noise. A type outside NBBO/order leaves the bytes as they are.
    """
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 256, (n, 56), dtype=np.uint8)
    kind = rng.choice(np.asarray(kinds, dtype=np.uint8), n)
    p[:, 0] = kind
    sym = rng.integers(0, symbols, n).astype(">i4").view(np.uint8).reshape(n, 4)
    for k, off in ((NBBO_TYPE, NBBO_FIELDS["symbol"]), (ORDER_TYPE, ORDER_FIELDS["symbol"])):
        rows = kind == k
        p[rows, off:off + 4] = sym[rows]
    return p
