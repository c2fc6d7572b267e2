"""The records a metrics reader's views take and return (pure, no I/O).

- `FigureRequest` / `SeriesValue`: one figure of the catalogue aggregated over a window,
  per series of a scope (`MetricsReader.read_figure`);
- `QueryNow` and `status_now`: how a query's newest run stands now (`queries_now`);
- `Heartbeat`: an alert evaluator's lease heartbeat (`heartbeats`);
- `HistoryRow`: one alert state change or webhook attempt (`history_*`).

Field, measurement and tag names in a request come from the catalogue and the vocabulary,
never from a user; the user's values are in `scope` only, which a backend binds as
parameters (InfluxQL's `$name`) or compares as values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from collector.run_status import STATUS_FINISHED, STATUS_STOPPED, run_status


@dataclass(frozen=True)
class FigureRequest:
    """One field of one measurement, aggregated over [start, end) per series of `group`.

    `aggregate`: mean, max, min, last, sum, p50..p99.99, `increase` (a counter's growth:
    max − min) or `per_second` (the sum over the window's length). `histograms`: the field
    holds encoded latency histograms, merged exactly before the percentile is taken.
    `against`: a second field of the same points; the value is then the share of points
    holding both where `field op against`. `steady`: leave out a run's start-up batch
    (points tagged phase=startup).
    """
    measurement: str
    field: str
    aggregate: str
    start_ns: int
    end_ns: int
    group: tuple[str, ...] = ()
    scope: tuple[tuple[str, str], ...] = ()     # (tag, value) every point must have ("" matches an absent tag)
    histograms: bool = False
    against: str | None = None
    op: str = ">"
    steady: bool = False


@dataclass(frozen=True)
class SeriesValue:
    """The aggregate of one series (its `group` tags), in the field's own unit."""
    tags: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class QueryNow:
    """One query as it stands: its newest run's status (lost included) and its last sign of life."""
    job: str
    query: str
    run_id: str
    status: str | None                 # None: no `runs` row (an older monitor's batches only)
    last_batch_end_ns: int | None
    started_ns: int | None
    last_seen_ns: int | None

    def labels(self) -> dict[str, str]:
        """Return the labels a notification names the query by."""
        out = {"job": self.job, "query": self.query}
        if self.run_id:
            out["run_id"] = self.run_id
        return out

    def batch_age_ns(self, now_ns: int) -> int | None:
        """Return now − the last batch's end (or the run's start), None for a run that ended on purpose."""
        if self.status in (STATUS_FINISHED, STATUS_STOPPED):
            return None
        marks = [t for t in (self.last_batch_end_ns, self.started_ns) if t is not None]
        return max(0, now_ns - max(marks)) if marks else None


def status_now(q: QueryNow, now_ns: int) -> str | None:
    """Return the newest run's status as it stands: lost for a running run gone quiet."""
    if q.status is None:
        return None
    if q.last_seen_ns is None:              # an older monitor's row: it sent no heartbeats to miss
        return run_status(q.status, None, now_ns)
    marks = [t for t in (q.last_seen_ns, q.last_batch_end_ns, q.started_ns) if t is not None]
    return run_status(q.status, max(marks), now_ns)


@dataclass(frozen=True)
class Heartbeat:
    """An evaluator's newest heartbeat in a namespace: who, since when a candidate, whether it let go."""
    holder: str
    started_ns: int | None
    released: bool
    seen_ns: int


@dataclass(frozen=True)
class HistoryRow:
    """One alert history point: its rule, time and fields (state, value, ... or attempt, ok, ...)."""
    rule: str
    at_ns: int
    fields: Mapping[str, Any] = field(default_factory=dict)
