"""What a metrics producer needs from a writer: the `PointSink` protocol and its `WriterStats`.

Apart from the writer: producers (the job's metrics shipper) depend on this interface only,
which `InfluxWriter` and `collector.testing.MemoryWriter` both provide.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Protocol

from collector.influx.lineproto import Point


class WriterStats(NamedTuple):
    """Counters of an `InfluxWriter` since it was created.

    Every point added ends up in exactly one of: written (directly), spooled (on disk;
    later backfilled, dropped past the bound, or still there = `spool_points`), dropped
    before reaching the disk, rejected by the server (HTTP 400: malformed, type conflict),
    or still in the queue.
    """
    points_added: int
    points_written: int
    points_spooled: int
    points_backfilled: int
    points_dropped: int
    points_rejected: int
    write_errors: int
    last_error: str | None
    spool_bytes: int
    spool_points: int
    queue_len: int
    server_up: bool


class PointSink(Protocol):
    """What a metrics producer needs from a writer (`InfluxWriter`, `collector.testing.MemoryWriter`)."""

    def add(self, points: Point | Iterable[Point], rp: str | None = None) -> int: ...

    def delivered(self) -> int: ...

    def flush(self, timeout: float = 10.0) -> bool: ...

    def close(self, timeout: float = 10.0) -> bool: ...

    def stats(self) -> WriterStats: ...
