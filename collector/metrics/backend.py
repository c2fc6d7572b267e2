"""The backend boundary: the write interface, the alerts' read interface, and the one error to catch.

Writers (the shipper, the listener, the ingress, the alert evaluator) need only
`PointSink`: `add(points)` never blocks, `flush`, `close`, `delivered`, `stats`. Readers
need `MetricsReader`: typed views, each one question with a typed answer, so no caller
builds a backend's query language. InfluxDB implements both in `collector/influx/`
(`InfluxWriter`, `collector.influx.reader.InfluxReader`); `collector.metrics.memory.MemoryBackend`
implements both in memory for unit tests. A backend's failures are `MetricsError`s
(InfluxDB's `InfluxError` is one), which the UI and the alerts catch.
"""
from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple, Protocol

from collector.metrics.point import Point
from collector.metrics.views import FigureRequest, Heartbeat, HistoryRow, QueryNow, SeriesValue


class MetricsError(RuntimeError):
    """A request to the metrics backend failed; `status` is its answer's code (None: no answer at all)."""

    backend = "metrics backend"

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def unreachable(self) -> bool:
        """Whether the backend did not answer at all (down, or not there): what a caller says differently."""
        return self.status is None


class WriterStats(NamedTuple):
    """Counters of a writer since it was created.

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
    """What a metrics producer needs from a writer (`InfluxWriter`, `MemoryBackend`, `MemoryWriter`)."""

    def add(self, points: Point | Iterable[Point], rp: str | None = None) -> int: ...

    def delivered(self) -> int: ...

    def flush(self, timeout: float = 10.0) -> bool: ...

    def close(self, timeout: float = 10.0) -> bool: ...

    def stats(self) -> WriterStats: ...


class MetricsReader(Protocol):
    """The typed views the alerts read; every method raises `MetricsError` when the backend can't answer."""

    #: how messages name the backend, e.g. "InfluxDB at http://127.0.0.1:18086"
    where: str

    def read_figure(self, request: FigureRequest) -> list[SeriesValue]:
        """Return the request's aggregate per series that has a value in the window."""

    def queries_now(self, job: str | None, query: str | None, now_ns: int) -> list[QueryNow]:
        """Return every query of the scope (tags run and query) as it stands at `now_ns`."""

    def known_jobs(self) -> tuple[str, ...]:
        """Return every job (`run` tag) rules can name, the most recently written first."""

    def has_data(self, measurement: str, field: str | None, tags: Mapping[str, str]) -> bool:
        """Return whether any point of `measurement` with those tags (and `field`, when given) was written."""

    def tag_values(self, measurement: str, key: str, where: Mapping[str, str]) -> tuple[str, ...]:
        """Return the values of tag `key` on points of `measurement` with the `where` tags, sorted."""

    def steps(self, run: str) -> list[str]:
        """Return the latency steps a run has data for, in its job's order."""

    def step_filters(self, run: str, step: str) -> tuple[list[str], list[str]]:
        """Return the pipelines and workers a step of a run has data for."""

    def heartbeat(self, namespace: str, holder: str, started_ns: int, released: bool, at_ns: int) -> None:
        """Store an evaluator's lease heartbeat now (not batched: the others read it at their next cycle)."""

    def heartbeats(self, namespace: str, since_ns: int) -> list[Heartbeat]:
        """Return each holder's newest heartbeat in the namespace after `since_ns`."""

    def history_latest(self, namespace: str, legacy: bool) -> list[HistoryRow]:
        """Return each rule's newest state change in the namespace (`legacy`: untagged points count too)."""

    def history_events(self, namespace: str, legacy: bool, rule: str, limit: int) -> list[HistoryRow]:
        """Return a rule's state changes, newest first."""

    def history_notifications(self, namespace: str, legacy: bool, rule: str | None, limit: int,
                              failed_only: bool) -> list[HistoryRow]:
        """Return webhook attempts (of one rule, or all), newest first."""
