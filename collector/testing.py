"""In-memory stand-ins for unit tests of code that produces metrics (no InfluxDB, no threads).

`MemoryWriter` keeps what a producer adds and checks each point is one InfluxDB's line
protocol can carry; `MemoryBackend` (`collector.metrics.memory`) also answers the read
interface, for tests of what reads the metrics back (the alerts).
"""
from __future__ import annotations

import threading
from typing import Iterable

from collector.influx.lineproto import encode_lines
from collector.metrics.backend import WriterStats
from collector.metrics.memory import MemoryBackend
from collector.metrics.point import Point, split_by_rp

__all__ = ["MemoryBackend", "MemoryWriter"]


class MemoryWriter:
    """A `PointSink` that keeps every added point in memory, grouped by retention policy.

    Points are encoded on `add()` (as `InfluxWriter` would on its thread), so a point line
    protocol cannot carry fails the test at once.

    >>> w = MemoryWriter()
    >>> w.add(Point("step", {"run": "r1"}, {"ms": 3.5}, 1))
    >>> w.measurement("step")[0].fields["ms"]
    3.5
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.points: list[Point] = []
        self.by_rp: dict[str | None, list[Point]] = {}
        self.flushes = 0
        self.closed = False

    def add(self, points: Point | Iterable[Point], rp: str | None = None) -> int:
        """Keep the points (raises ValueError for a point line protocol cannot carry); return
        the ticket of the last one, as `InfluxWriter.add` does."""
        pts = [points] if isinstance(points, Point) else list(points)
        encode_lines(pts)
        with self._lock:
            self.points.extend(pts)
            for r, group in split_by_rp(pts, rp).items():
                self.by_rp.setdefault(r, []).extend(group)
            return len(self.points)

    def delivered(self) -> int:
        """Every point is delivered as soon as it is added."""
        with self._lock:
            return len(self.points)

    def flush(self, timeout: float = 10.0) -> bool:
        """Count the flush; nothing is pending."""
        self.flushes += 1
        return True

    def close(self, timeout: float = 10.0) -> bool:
        """Mark closed."""
        self.closed = True
        return True

    def stats(self) -> WriterStats:
        """Return counters as if every point had been written."""
        n = len(self.points)
        return WriterStats(n, n, 0, 0, 0, 0, 0, None, 0, 0, 0, True)

    def measurement(self, name: str, rp: str | None = None) -> list[Point]:
        """Return the points of one measurement (of one retention policy if `rp` is given)."""
        pts = self.points if rp is None else self.by_rp.get(rp, [])
        return [p for p in pts if p.measurement == name]

    def lines(self) -> bytes:
        """Return every point as line protocol."""
        return encode_lines(self.points)
