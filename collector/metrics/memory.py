"""`MemoryBackend`: both sides of the backend boundary in memory, for unit tests without a server.

It keeps every point added as InfluxDB would (a point with the same measurement, tags and
time as an earlier one merges its fields into it; an empty tag is no tag) and answers the
read interface's views (`collector.metrics.backend.MetricsReader`) from them, with
InfluxDB's semantics where the views depend on them: `percentile` is the nearest rank,
`increase` is max − min, an absent tag matches "", a window is [start, end). Points added
with a retention policy (rollups) are kept but not read: the views read the default one,
which holds the 1-s points.

>>> backend = MemoryBackend()
>>> backend.add(Point("spark_progress", {"run": "r"}, {"batch_ms": 120}, 10))
1
>>> backend.read_figure(FigureRequest("spark_progress", "batch_ms", "max", 0, 20, ("run",)))[0].value
120.0
"""
from __future__ import annotations

import json
import math
import operator
import threading
from typing import Iterable, Mapping

from collector.catalogue import FIELD_BATCH_MS, INCREASE, LEVELS, PER_SECOND, QUERY
from collector.metrics.backend import MetricsError, WriterStats
from collector.metrics.point import Point
from collector.metrics.views import FigureRequest, Heartbeat, HistoryRow, QueryNow, SeriesValue
from collector.run_status import FIELD_LAST_SEEN_NS, FIELD_STATUS
from collector.units import NS
from collector.vocabulary import (ALERT_EVENTS, ALERT_LEASE, ALERT_NOTIFICATIONS, FIELD_COUNT, LATENCY, PHASE_STARTUP,
                                  RUNS, SPARK_PROGRESS, TAG_NAMESPACE, TAG_PHASE, TAG_PIPELINE, TAG_QUERY, TAG_RULE,
                                  TAG_RUN, TAG_RUN_ID, TAG_STEP, TAG_WORKER)

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
LOOKBACK_S = 7 * 86400.0
_HOLDER, _STARTED, _RELEASED, _START_NS, _STEPS = "holder", "started_ns", "released", "start_ns", "steps"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _aggregate(aggregate: str, timed: list[tuple[int, float]], window_s: float) -> float | None:
    """Return InfluxQL's aggregate of (time, value) pairs (None: no value)."""
    if not timed:
        return None
    values = [v for _, v in timed]
    if aggregate == "mean":
        return sum(values) / len(values)
    if aggregate in ("max", "min"):
        return float(max(values) if aggregate == "max" else min(values))
    if aggregate == "last":
        return float(max(timed, key=lambda tv: tv[0])[1])
    if aggregate == "sum":
        return float(sum(values))
    if aggregate == PER_SECOND:
        return sum(values) / window_s
    if aggregate == INCREASE:
        return float(max(values) - min(values))
    if aggregate.startswith("p"):
        ranked = sorted(values)
        i = int(math.floor(len(ranked) * float(aggregate[1:]) / 100.0 + 0.5)) - 1
        return float(ranked[i]) if 0 <= i < len(ranked) else None
    raise ValueError(f"aggregate {aggregate!r} is unknown")


class MemoryBackend:
    """A writer (`PointSink`) and a reader (`MetricsReader`) over the same points in memory.

    `failing`: when set, every read and direct write raises it (a backend that is down or
    refuses), so a test drives the callers' error paths.
    """

    where = "the in-memory metrics backend"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._points: dict[tuple, Point] = {}
        self.added = 0
        self.closed = False
        self.failing: MetricsError | None = None

    # -- the write interface

    def add(self, points: Point | Iterable[Point], rp: str | None = None) -> int:
        """Keep the points (merging one with the same series and time, as InfluxDB does); return the last ticket."""
        pts = [points] if isinstance(points, Point) else list(points)
        with self._lock:
            for p in pts:
                tags = tuple(sorted((k, v) for k, v in p.tags.items() if v != ""))
                key = (p.rp or rp, p.measurement, tags, int(p.time_ns))
                old = self._points.get(key)
                fields = {**old.fields, **p.fields} if old is not None else dict(p.fields)
                self._points[key] = Point(p.measurement, dict(tags), fields, int(p.time_ns), p.rp or rp)
            self.added += len(pts)
            return self.added

    def write(self, points: Iterable[Point]) -> None:
        """Keep the points now (what a direct, unbatched write does); raises `failing` when set."""
        self._check()
        self.add(points)

    def delivered(self) -> int:
        return self.added

    def flush(self, timeout: float = 10.0) -> bool:
        return True

    def close(self, timeout: float = 10.0) -> bool:
        self.closed = True
        return True

    def stats(self) -> WriterStats:
        return WriterStats(self.added, self.added, 0, 0, 0, 0, 0, None, 0, 0, 0, True)

    def points(self, measurement: str | None = None) -> list[Point]:
        """Return the stored points (of one measurement), oldest first."""
        with self._lock:
            found = [p for p in self._points.values() if measurement is None or p.measurement == measurement]
        return sorted(found, key=lambda p: p.time_ns)

    # -- selecting

    def _check(self) -> None:
        if self.failing is not None:
            raise self.failing

    def _select(self, measurement: str, tags: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                start_ns: int | None = None, end_ns: int | None = None, *, after: bool = False) -> list[Point]:
        self._check()
        want = dict(tags)
        out = []
        for p in self.points(measurement):
            if p.rp is not None or any(p.tags.get(k, "") != v for k, v in want.items()):
                continue
            if start_ns is not None and (p.time_ns <= start_ns if after else p.time_ns < start_ns):
                continue
            if end_ns is not None and p.time_ns >= end_ns:
                continue
            out.append(p)
        return out

    # -- the read interface

    def read_figure(self, request: FigureRequest) -> list[SeriesValue]:
        from collector.query.series import merge_blobs  # lazy: the histogram decoder, for latency figures only
        req = request
        groups: dict[tuple, list[Point]] = {}
        for p in self._select(req.measurement, req.scope, req.start_ns, req.end_ns):
            if req.steady and p.tags.get(TAG_PHASE) == PHASE_STARTUP:
                continue
            groups.setdefault(tuple(p.tags.get(t, "") for t in req.group), []).append(p)
        out = []
        for key, pts in sorted(groups.items()):
            tags = dict(zip(req.group, key))
            if req.histograms:
                hist = merge_blobs(p.fields[req.field] for p in pts if isinstance(p.fields.get(req.field), str))
                if hist.total_count:
                    out.append(SeriesValue(tags, float(hist.value_at_percentile(float(req.aggregate[1:])))))
            elif req.against is not None:
                both = [(p.fields[req.field], p.fields[req.against]) for p in pts
                        if _number(p.fields.get(req.field)) and _number(p.fields.get(req.against))]
                if both:
                    met = sum(1 for a, b in both if _OPS[req.op](a, b))
                    out.append(SeriesValue(tags, met / len(both)))
            else:
                timed = [(p.time_ns, p.fields[req.field]) for p in pts if _number(p.fields.get(req.field))]
                value = _aggregate(req.aggregate, timed, (req.end_ns - req.start_ns) / NS)
                if value is not None:
                    out.append(SeriesValue(tags, value))
        return out

    def queries_now(self, job: str | None, query: str | None, now_ns: int) -> list[QueryNow]:
        scope = {k: v for k, v in ((TAG_RUN, job), (TAG_QUERY, query)) if v is not None}
        since = now_ns - int(LOOKBACK_S * NS)
        runs: dict[tuple, dict[str, tuple[int, object]]] = {}        # (run, query, run_id) -> field -> newest
        for p in self._select(RUNS, scope, since):
            last = runs.setdefault((p.tags.get(TAG_RUN, ""), p.tags.get(TAG_QUERY, ""), p.tags.get(TAG_RUN_ID, "")),
                                   {})
            for f in (FIELD_STATUS, FIELD_LAST_SEEN_NS, _START_NS):
                if f in p.fields and (f not in last or p.time_ns >= last[f][0]):
                    last[f] = (p.time_ns, p.fields[f])
        newest: dict[tuple[str, str], tuple[int, str, str | None, int | None]] = {}
        for (run, q, run_id), last in runs.items():
            status, seen, started = (last.get(f, (0, None))[1] for f in (FIELD_STATUS, FIELD_LAST_SEEN_NS, _START_NS))
            rank = int(started) if _number(started) else -1
            if (run, q) not in newest or rank > newest[(run, q)][0]:
                newest[(run, q)] = (rank, run_id, status if isinstance(status, str) else None,
                                    int(seen) if _number(seen) else None)
        batches: dict[tuple[str, str], int] = {}
        for p in self._select(SPARK_PROGRESS, scope, since):
            ms = p.fields.get(FIELD_BATCH_MS)
            if _number(ms):
                key = (p.tags.get(TAG_RUN, ""), p.tags.get(TAG_QUERY, ""))
                batches[key] = max(batches.get(key, 0), p.time_ns + int(ms) * 1_000_000)
        out = []
        for key in sorted(set(newest) | set(batches)):
            rank, run_id, status, seen = newest.get(key, (-1, "", None, None))
            out.append(QueryNow(key[0], key[1], run_id, status, batches.get(key), rank if rank >= 0 else None, seen))
        return out

    def known_jobs(self) -> tuple[str, ...]:
        measurements = {LATENCY, RUNS} | {lv.measurement for lv in LEVELS.values() if TAG_RUN in lv.tags}
        names: set[str] = set()
        last: dict[str, int] = {}
        for m in measurements:
            for p in self._select(m):
                run = p.tags.get(TAG_RUN)
                if run:
                    names.add(run)
                    if m in (RUNS, LEVELS[QUERY].measurement) or (m == LATENCY and FIELD_COUNT in p.fields):
                        last[run] = max(last.get(run, 0), p.time_ns)
        return tuple(sorted(names, key=lambda n: (-last.get(n, 0), n)))

    def has_data(self, measurement: str, field: str | None, tags: Mapping[str, str]) -> bool:
        return any(field is None or field in p.fields for p in self._select(measurement, tags))

    def tag_values(self, measurement: str, key: str, where: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(sorted({p.tags[key] for p in self._select(measurement, where) if p.tags.get(key)}))

    def steps(self, run: str) -> list[str]:
        from collector.query.series import step_order, step_rank  # lazy: the pages' step order, one rule
        seen: dict[str, int] = {}
        for p in self._select(LATENCY, {TAG_RUN: run}):
            if FIELD_COUNT in p.fields:
                seen.setdefault(p.tags.get(TAG_STEP, ""), p.time_ns)
        declared: list[str] = []
        for p in reversed(self._select(RUNS, {TAG_RUN: run})):
            if isinstance(p.fields.get(_STEPS), str):
                declared += [s for s in json.loads(p.fields[_STEPS]) if isinstance(s, str)]
        order = step_order(tuple(dict.fromkeys(declared)), seen)
        return sorted(seen, key=lambda s: step_rank(s, order))

    def step_filters(self, run: str, step: str) -> tuple[list[str], list[str]]:
        where = {TAG_RUN: run, TAG_STEP: step}
        return list(self.tag_values(LATENCY, TAG_PIPELINE, where)), list(self.tag_values(LATENCY, TAG_WORKER, where))

    def heartbeat(self, namespace: str, holder: str, started_ns: int, released: bool, at_ns: int) -> None:
        self.write([Point(ALERT_LEASE, {TAG_NAMESPACE: namespace, _HOLDER: holder},
                          {_STARTED: started_ns, _RELEASED: released}, at_ns)])

    def heartbeats(self, namespace: str, since_ns: int) -> list[Heartbeat]:
        newest: dict[str, Point] = {}
        for p in self._select(ALERT_LEASE, {TAG_NAMESPACE: namespace}, since_ns, after=True):
            newest[p.tags.get(_HOLDER, "")] = p            # oldest first: the newest stays
        return [Heartbeat(h, p.fields.get(_STARTED) if _number(p.fields.get(_STARTED)) else None,
                          p.fields.get(_RELEASED) is True, p.time_ns) for h, p in sorted(newest.items())]

    def _history(self, measurement: str, namespace: str, legacy: bool, rule: str | None = None) -> list[HistoryRow]:
        names = (namespace, "") if legacy else (namespace,)
        rows = [HistoryRow(p.tags.get(TAG_RULE, ""), p.time_ns, dict(p.fields)) for p in self._select(measurement)
                if p.tags.get(TAG_NAMESPACE, "") in names and (rule is None or p.tags.get(TAG_RULE, "") == rule)]
        return sorted(rows, key=lambda r: r.at_ns, reverse=True)

    def history_latest(self, namespace: str, legacy: bool) -> list[HistoryRow]:
        latest: dict[str, HistoryRow] = {}
        for row in self._history(ALERT_EVENTS, namespace, legacy):
            latest.setdefault(row.rule, row)
        return list(latest.values())

    def history_events(self, namespace: str, legacy: bool, rule: str, limit: int) -> list[HistoryRow]:
        return self._history(ALERT_EVENTS, namespace, legacy, rule)[:int(limit)]

    def history_notifications(self, namespace: str, legacy: bool, rule: str | None, limit: int,
                              failed_only: bool) -> list[HistoryRow]:
        rows = self._history(ALERT_NOTIFICATIONS, namespace, legacy, rule)
        return [r for r in rows if not failed_only or r.fields.get("ok") is False][:int(limit)]
