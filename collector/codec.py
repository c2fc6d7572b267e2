"""HdrHistogram wire and text formats for :class:`LatencyHistogram`.

``encode``/``decode`` speak HdrHistogram's V2 compressed format (base64 of a header plus
zlib-compressed ZigZag-LEB128 counts, zero runs as negative numbers): the blob the
``hdrh`` package's ``encode()`` produces and that Java, C, Go and HdrHistogram's online
plotter read. The counts layouts are identical, so the ``hdrh`` package's own C encoder
and decoder do the byte work on a copy of our counts array (one memcpy each way) rather
than a second implementation of the format here.

``to_hgrm`` writes the percentile distribution text (``.hgrm``) of Java's
``outputPercentileDistribution``. It follows Java (and C), not the ``hdrh`` package, in
two places: the percentile steps are whole ticks per half-distance to 100 % (hdrh skips
Java's integer cast, so its rows land on other percentiles), and the footer scales the
std. deviation and prints ``Total count`` as an integer.
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np
from hdrh.histogram import HdrHistogram

from collector.histogram import BUCKET_COUNT, BUCKET_HIGHEST_NS, COUNTS_LEN, HIGHEST_RECORDABLE_NS, HIGHEST_TRACKABLE_NS, LOWEST_TRACKABLE_NS, SIGNIFICANT_FIGURES, SUB_BUCKET_COUNT, UNIT_MAGNITUDE, LatencyHistogram, SparseCounts


def to_hdrh(hist: LatencyHistogram, sparse: SparseCounts | None = None) -> HdrHistogram:
    """Return an ``hdrh`` HdrHistogram(1 ns, 1 h, 3 digits) holding the same counts.

    `sparse`: the histogram's `to_sparse()`, if the caller has it (saves a pass).
    """
    out = HdrHistogram(LOWEST_TRACKABLE_NS, HIGHEST_TRACKABLE_NS, SIGNIFICANT_FIGURES)
    np.ctypeslib.as_array(out.counts)[:] = hist.counts
    if sparse is None:
        sparse = hist.to_sparse()
    if len(sparse):
        # What hdrh's own decoder calls to set total, min and max from the counts.
        out.set_internal_tacking_values(int(sparse.indices[0]), int(sparse.indices[-1]), sparse.total)
    return out


def from_hdrh(other: HdrHistogram) -> LatencyHistogram:
    """Return the LatencyHistogram of an ``hdrh`` histogram with a compatible layout."""
    if other.unit_magnitude != UNIT_MAGNITUDE or other.sub_bucket_count != SUB_BUCKET_COUNT:
        raise ValueError(
            "histogram layout differs: lowest trackable value "
            f"{other.lowest_trackable_value} and {other.significant_figures} significant figures, "
            f"need {LOWEST_TRACKABLE_NS} and {SIGNIFICANT_FIGURES}"
        )
    # Same unit and sub-buckets: the layouts agree index for index, whatever the range.
    source = np.ctypeslib.as_array(other.counts)
    if source[COUNTS_LEN:].any():
        raise ValueError(f"histogram holds values above {HIGHEST_RECORDABLE_NS} ns")
    counts = np.zeros(COUNTS_LEN, np.int64)
    counts[: min(len(source), COUNTS_LEN)] = source[:COUNTS_LEN]
    return LatencyHistogram(counts)


def encode(hist: LatencyHistogram, sparse: SparseCounts | None = None) -> str:
    """Return the histogram as an HdrHistogram V2 compressed, base64 blob (`sparse`: as to_hdrh)."""
    return to_hdrh(hist, sparse).encode().decode("ascii")


def decode(blob: str | bytes) -> LatencyHistogram:
    """Return the histogram of an HdrHistogram V2 compressed, base64 blob."""
    return from_hdrh(HdrHistogram.decode(blob))


def _next_percentile_level(level: float, ticks_per_half_distance: int) -> float:
    """Step as Java's PercentileIterator does: whole ticks per half-distance to 100 %."""
    halvings = int(math.log(100.0 / (100.0 - level)) / math.log(2))
    return level + 100.0 / (ticks_per_half_distance * (1 << (halvings + 1)))


def _percentile_rows(hist: LatencyHistogram, ticks_per_half_distance: int) -> Iterator[tuple[int, float, int]]:
    """Yield (value ns, percentile level, cumulative count) as Java's PercentileIterator would."""
    nonzero = np.flatnonzero(hist.counts)
    if not len(nonzero):
        return
    counts = hist.counts[nonzero].tolist()
    total = sum(counts)
    level, cumulative = 0.0, 0
    for position, (index, count) in enumerate(zip(nonzero.tolist(), counts)):
        cumulative += count
        value = int(BUCKET_HIGHEST_NS[index])
        if position == len(counts) - 1:
            # The iterator stops stepping once all counts are seen: the pending level,
            # then one final 100 % row, both at the last bucket.
            if level < 100.0:
                yield value, level, cumulative
            yield value, 100.0, cumulative
            return
        while 100.0 * cumulative / total >= level:
            yield value, level, cumulative
            level = _next_percentile_level(level, ticks_per_half_distance)


def to_hgrm(
    hist: LatencyHistogram, value_unit_ratio: float = 1.0, ticks_per_half_distance: int = 5
) -> str:
    """Return the percentile distribution (.hgrm text); values are divided by ``value_unit_ratio``.

    ``value_unit_ratio`` is Java's outputValueUnitScalingRatio: 1e3 prints µs, 1e6 ms.
    """
    digits = SIGNIFICANT_FIGURES
    row = f"%12.{digits}f %2.12f %10d %14.2f\n"
    last_row = f"%12.{digits}f %2.12f %10d\n"
    lines = ["%12s %14s %10s %14s\n\n" % ("Value", "Percentile", "TotalCount", "1/(1-Percentile)")]
    for value, level, cumulative in _percentile_rows(hist, ticks_per_half_distance):
        fraction = level / 100.0
        if level != 100.0:
            lines.append(row % (value / value_unit_ratio, fraction, cumulative, 1.0 / (1.0 - fraction)))
        else:
            lines.append(last_row % (value / value_unit_ratio, fraction, cumulative))
    lines.append(
        f"#[Mean    = %12.{digits}f, StdDeviation   = %12.{digits}f]\n"
        % (hist.mean / value_unit_ratio, hist.stddev / value_unit_ratio)
    )
    lines.append(
        f"#[Max     = %12.{digits}f, Total count    = %12d]\n"
        % (hist.max / value_unit_ratio, hist.total_count)
    )
    lines.append("#[Buckets = %12d, SubBuckets     = %12d]\n" % (BUCKET_COUNT, SUB_BUCKET_COUNT))
    return "".join(lines)
