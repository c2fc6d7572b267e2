"""The `Point` record every writer builds: a measurement, tags, fields and a time (pure).

Backend-neutral: the InfluxDB writer encodes it as line protocol
(`collector.influx.lineproto`), the in-memory backend keeps it as it is.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence


class Point(NamedTuple):
    """One point; `time_ns` is nanoseconds since the epoch.

    `rp` names the retention policy the point belongs to (None: the one the writer is
    given, else the store's default), so one batch can carry 1-s points and rollups.

    >>> Point("cpu", {"host": "a"}, {"v": 1}, 10).fields["v"]
    1
    """
    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, int | float | str | bool]
    time_ns: int
    rp: str | None = None


def split_by_rp(points: Sequence[Point], rp: str | None) -> dict[str | None, list[Point]]:
    """Group points by retention policy: their own `rp`, else `rp`; order kept within a group."""
    if all(p.rp is None or p.rp == rp for p in points):
        return {rp: list(points)}
    out: dict[str | None, list[Point]] = {}
    for p in points:
        out.setdefault(p.rp or rp, []).append(p)
    return out
