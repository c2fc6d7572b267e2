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

Wallaroo's ranges stop at "> 1 s", where a Spark job's event-time latencies begin: a step
page shows them followed by :data:`LONG_BINS_NS` (4 s .. 1 h) up to the longest range its
data reaches (:func:`step_bins`), so sub-second data keeps exactly Wallaroo's twelve ranges.
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
#: Edges past Wallaroo's 1 s for Spark-scale latencies, up to an hour (a histogram clamps at ~73 min).
LONG_BINS_NS = tuple(int(s * 1e9) for s in (4, 16, 60, 4 * 60, 16 * 60, 3600))
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


def edge_label(ns: int) -> str:
    """Return a range's edge as labelled: `format_ns` below a minute, whole minutes or hours past it ("4 min")."""
    for unit, scale in (("h", 3_600 * 10**9), ("min", 60 * 10**9)):
        if ns >= scale and ns % scale == 0:
            return f"{ns // scale} {unit}"
    return format_ns(ns)


def ui_labels(edges_ns: Sequence[int] = WALLAROO_UI_BINS_NS) -> tuple[str, ...]:
    """Return the range labels for the given edges: "≤ 1 µs", ..., "≤ 1 s", "> 1 s"."""
    return tuple(f"≤ {edge_label(e)}" for e in edges_ns) + (f"> {edge_label(edges_ns[-1])}",)


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


def step_bins(hist: LatencyHistogram | SparseCounts) -> list[UiBin]:
    """Return a step page's ranges: Wallaroo's, then the long ones (`LONG_BINS_NS`) up to the longest with data.

    The last range is always "> its edge", so the ranges end just past the data: "> 1 s"
    when all of it is below a second, "≤ 1 min", "> 1 min" when it reaches 50 s.
    """
    edges = WALLAROO_UI_BINS_NS + LONG_BINS_NS
    counts = [b.count for b in ui_bins(hist, edges)]
    top = max((i for i, n in enumerate(counts) if n), default=0)
    return ui_bins(hist, edges[:min(len(edges), max(len(WALLAROO_UI_BINS_NS), top + 1))])
