"""Which stored intervals cover a time range: rollups where they exist, 1-s points elsewhere (pure).

The collector writes each series at 1 s and as rollups of 10 s, 1 min, 10 min and 1 h
(collector/aggregate.py). To read a range, the coarsest intervals that lie wholly inside
it are taken first; what they leave (the range's ragged edges, and any rollup that is
missing: not closed yet, or lost to a job restart) is filled from the next finer length,
down to the 1-s points. The result is exact, and a day of one series costs ~50 intervals
instead of 86,400.
"""
from __future__ import annotations

from typing import Iterable

from .ranges import NS, TimeRange

BASE_S = 1
#: Rollup lengths the collector writes (collector.aggregate.ROLLUP_INTERVALS_S), coarse first.
ROLLUPS_S = (3600, 600, 60, 10)
#: Chart bucket lengths: the stored lengths, so a bucket is a whole number of intervals.
BUCKETS_S = (BASE_S,) + tuple(reversed(ROLLUPS_S))


def aligned_span(gap: TimeRange, size_ns: int) -> TimeRange | None:
    """Return the part of `gap` made of whole `size_ns` intervals aligned to the epoch, or None."""
    first = -(-gap.start_ns // size_ns) * size_ns
    last = gap.end_ns // size_ns * size_ns
    return TimeRange(first, last) if first < last else None


def subtract(gaps: Iterable[TimeRange], size_ns: int, present: Iterable[int]) -> list[TimeRange]:
    """Return `gaps` without the intervals [t, t + size_ns) of `present` that lie wholly inside one."""
    starts = sorted(set(present))
    out: list[TimeRange] = []
    for gap in gaps:
        cur = gap.start_ns
        for t in starts:
            if t >= gap.start_ns and t + size_ns <= gap.end_ns and t >= cur:
                if t > cur:
                    out.append(TimeRange(cur, t))
                cur = t + size_ns
        if cur < gap.end_ns:
            out.append(TimeRange(cur, gap.end_ns))
    return out


def rollups_up_to(top_s: int) -> tuple[int, ...]:
    """Return the rollup lengths (s) no coarser than `top_s`, coarse first."""
    return tuple(s for s in ROLLUPS_S if s <= top_s)


def bucket_s(rng: TimeRange, max_points: int = 400) -> int:
    """Return the chart bucket (s): the finest stored length giving at most ~`max_points` buckets."""
    for s in BUCKETS_S:
        if rng.seconds / s <= max_points:
            return s
    return BUCKETS_S[-1]


def bucket_of(t_ns: int, size_s: int) -> int:
    """Return the start of the `size_s` bucket holding `t_ns`."""
    return t_ns - t_ns % (size_s * NS)
