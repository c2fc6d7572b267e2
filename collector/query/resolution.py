"""Which stored intervals cover a time range: rollups where they exist, 1-s points elsewhere (pure).

The collector writes each series at 1 s and as rollups of 10 s, 1 min, 10 min and 1 h
(collector/aggregate.py). To read a range, the coarsest intervals that lie wholly inside
it are taken first; what they leave (the range's ragged edges, and any rollup that is
missing: not closed yet, or lost to a job restart) is filled from the next finer length,
down to the 1-s points. The result is exact, and a day of one series costs ~50 intervals
instead of 86,400.
"""
from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple, Sequence

from collector.query.ranges import TimeRange
from collector.units import NS

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


class Read(NamedTuple):
    """One read of a plan: the intervals of length `size_s` starting in `span` (1: the 1-s points)."""
    size_s: int
    span: TimeRange
    level: int              # index of `size_s` in the plan's rollup lengths; len(lengths) for 1-s points


def plan(pending: Iterable[tuple[TimeRange, int]], lengths_s: Sequence[int], settled_ns: int) -> list[Read]:
    """Return the reads covering each (gap, first level) assuming every rollup is there.

    Rollups are only planned where they end by `settled_ns` (older ones are written by
    now); the rest of each gap goes to finer lengths and finally to the 1-s points.
    """
    reads: list[Read] = []
    for gap, level in pending:
        left = [gap]
        for j in range(level, len(lengths_s)):
            size_ns = lengths_s[j] * NS
            nxt: list[TimeRange] = []
            for g in left:
                sp = aligned_span(TimeRange(g.start_ns, min(g.end_ns, settled_ns)), size_ns)
                if sp is None:
                    nxt.append(g)
                    continue
                reads.append(Read(lengths_s[j], sp, j))
                nxt += [r for r in (TimeRange(g.start_ns, sp.start_ns), TimeRange(sp.end_ns, g.end_ns))
                        if r.start_ns < r.end_ns]
            left = nxt
        reads += [Read(BASE_S, g, len(lengths_s)) for g in left]
    return reads


def missing(reads: Iterable[Read], present: Mapping[int, set[int]]) -> list[tuple[TimeRange, int]]:
    """Return the (gap, next level) left by rollups a plan expected but the database lacks."""
    out: list[tuple[TimeRange, int]] = []
    for r in reads:
        if r.size_s == BASE_S:
            continue
        size_ns = r.size_s * NS
        cur = r.span.start_ns                 # walk the rollups found, not every slot: spans may be years
        for t in sorted(t for t in present.get(r.level, ()) if r.span.start_ns <= t < r.span.end_ns):
            if t > cur:
                out.append((TimeRange(cur, t), r.level + 1))
            cur = t + size_ns
        if cur < r.span.end_ns:
            out.append((TimeRange(cur, r.span.end_ns), r.level + 1))
    return out
