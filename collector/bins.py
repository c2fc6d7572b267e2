"""Wallaroo's latency bins, derived from a :class:`LatencyHistogram`.

Wallaroo's workers counted each latency (ns, u64) into 65 power-of-two bins,
``bin = 64 - clz(v)``, the bit length of ``v``: bin 0 holds 0 and bin k (1..64) holds
``2**(k-1) <= v < 2**k``, reported under the key ``2**k``. (Its ``PowersOf2Histogram``
docstring says "3->bin:4, 4->bin:4"; the code, followed here, puts 4 in bin 3, key 8.)
HdrHistogram's buckets each lie inside one such power-of-two range, so
:func:`power_of_two_bins` is exact. Values in a LatencyHistogram stop at 2**42 - 1 ns,
so bins 43..64 stay empty.

Wallaroo's dashboard then summed those bins into the coarse ranges of
:data:`WALLAROO_UI_BINS_NS`. HdrHistogram buckets do not all end on those edges, so
:func:`ui_bins` puts each bucket in the first range whose edge is at or above the
bucket's highest value. A bucket is at most 1/1,024 of its values wide, so only values
within 0.1 % below an edge, the edge included, can count one range up: 65,984-66,000 ns
(bucket 65,984-66,047) count as "≤ 260 µs", and 4,000 ns (bucket 4,000-4,001) as
"≤ 16 µs". Below 2,048 ns buckets are 1 ns wide, so the 1 µs edge is exact.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from collector.histogram import BUCKET_HIGHEST_NS, BUCKET_LOWEST_NS, LatencyHistogram, SparseCounts

POWER_OF_TWO_BINS = 65

#: Upper edges (ns, inclusive) of the dashboard's latency ranges, as labelled.
WALLAROO_UI_BINS_NS = (
    1_000, 4_000, 16_000, 66_000, 260_000,
    1_000_000, 4_000_000, 16_000_000, 66_000_000, 260_000_000,
    1_000_000_000,
)  # fmt: skip
#: The edges Wallaroo's hub really summed to: 2**10 .. 2**30 ns, which its labels round.
WALLAROO_POW2_UI_BINS_NS = tuple(1 << k for k in range(10, 31, 2))


class UiBin(NamedTuple):
    """One dashboard latency range: its label, how many values fell in it, their share in %."""

    label: str
    count: int
    percent: float


def _bit_length(values: np.ndarray) -> np.ndarray:
    # frexp's exponent is the bit length of a positive integer (and 0 for 0); exact < 2**53.
    return np.frexp(values.astype(np.float64))[1].astype(np.int64)


_POW2_BIN = _bit_length(BUCKET_LOWEST_NS)  # non-decreasing over counts indices
assert np.array_equal(_POW2_BIN, _bit_length(BUCKET_HIGHEST_NS)), "bucket spans a power of two"
_POW2_BIN_START = np.searchsorted(_POW2_BIN, np.arange(POWER_OF_TWO_BINS), side="left")
_POW2_BIN_END = np.searchsorted(_POW2_BIN, np.arange(POWER_OF_TWO_BINS), side="right")


def _cumulative(hist: LatencyHistogram) -> np.ndarray:
    """Return counts summed up to (excluding) each index, with the grand total last."""
    return np.concatenate(([0], np.cumsum(hist.counts)))


def power_of_two_bins(hist: LatencyHistogram) -> np.ndarray:
    """Return Wallaroo's 65 power-of-two bin counts (int64): bin k holds bit_length(v) == k."""
    cumulative = _cumulative(hist)
    return cumulative[_POW2_BIN_END] - cumulative[_POW2_BIN_START]


def format_ns(ns: float) -> str:
    """Return a duration in the largest unit it reaches, to 3 significant digits ("66 µs")."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def ui_labels(edges_ns: Sequence[int] = WALLAROO_UI_BINS_NS) -> tuple[str, ...]:
    """Return the range labels for the given edges: "≤ 1 µs", ..., "≤ 1 s", "> 1 s"."""
    return tuple(f"≤ {format_ns(e)}" for e in edges_ns) + (f"> {format_ns(edges_ns[-1])}",)


WALLAROO_UI_LABELS = ui_labels()


def ui_bins(hist: LatencyHistogram | SparseCounts,
            edges_ns: Sequence[int] = WALLAROO_UI_BINS_NS) -> list[UiBin]:
    """Return the dashboard's latency ranges, each bucket placed by its highest value."""
    edges = np.asarray(edges_ns, dtype=np.int64)
    if len(edges) == 0 or np.any(np.diff(edges) <= 0):
        raise ValueError("edges must be non-empty and strictly increasing")
    sparse = hist.to_sparse() if isinstance(hist, LatencyHistogram) else hist
    cumulative = np.concatenate(([0], np.cumsum(sparse.counts)))
    # Buckets whose highest value is <= edge: a prefix of the (ascending) non-empty buckets.
    below = cumulative[np.searchsorted(BUCKET_HIGHEST_NS[sparse.indices], edges, side="right")]
    counts = np.diff(np.concatenate(([0], below, [cumulative[-1]]))).tolist()
    total = int(cumulative[-1])
    return [
        UiBin(label, count, 100.0 * count / total if total else 0.0)
        for label, count in zip(ui_labels(edges_ns), counts)
    ]
