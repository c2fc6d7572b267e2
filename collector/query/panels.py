"""The job and step pages' reads beside latency: backpressure, Spark batches, the ingress, markers.

Each is one InfluxQL request aggregated by InfluxDB, over measurements a run may not have
written (`spark_progress`, `runs`, `backpressure`, `ingress`, `alert_events`): a run without
them reads as empty views. Every value from a user is a bound parameter.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from collector.vocabulary import (ALERT_EVENTS, BACKPRESSURE, FIELD_FROM_SHARDS, FIELD_TO_SHARDS, INGRESS, INGRESS_BAD,
                                  JOB_RESCALE, RUNS, SPARK_PROGRESS, STEP_JOB, TAG_REASON, TAG_RULE, TAG_STEP)
from collector.influx import InfluxClient, InfluxError

from collector.query.ranges import TimeRange, format_time
from collector.query.run_scope import RunScope, scope_of
from collector.query.series import MARKET_SPREAD_STEPS, START_TO_END, TimeSeries

_BP_FIELDS = ("status", "busy_share", "backpressured_share", "idle_share", "backlog", "backlog_growth_per_s")

#: `spark_progress` phases drawn stacked, in Spark's order within a trigger; `triggerExecution`
#: is their whole and is drawn as the batch duration instead.
SPARK_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


@dataclass(frozen=True)
class StepBackpressure:
    """One step's latest `backpressure` point in a range; None for a figure the step did not write."""
    step: str
    time_ns: int
    status: str | None                    # OK / LOW / HIGH (Flink's thresholds, collector/backpressure.py)
    busy_share: float | None              # shares of wall time, 0..1
    backpressured_share: float | None
    idle_share: float | None
    backlog: int | None                   # events
    backlog_growth_per_s: float | None


@dataclass(frozen=True)
class BackpressureView:
    """The job page's backpressure panel for one run and range; empty lists when none was written.

    Series are named by step and bucketed like the page's other charts: shares are the
    mean of a bucket's points (they come about once a second), backlogs its maximum, so a
    short pile-up stays visible at coarse buckets.
    """
    latest: list[StepBackpressure]        # in the run's step order, then the Spark query, unknown steps last
    busy: list[TimeSeries]                # busy share 0..1 per step
    backpressured: list[TimeSeries]       # backpressured share 0..1 per step
    backlog: list[TimeSeries]             # events per step; the job's from `spark_progress` if it wrote none
    interval_s: int


@dataclass(frozen=True)
class Marker:
    """A moment drawn across a page's time charts: a query start or end, a rescale, an alert firing or resolving."""
    time_ns: int
    kind: str                             # "start", "end", "firing", "resolved", "rescale"
    text: str


@dataclass(frozen=True)
class BatchView:
    """Spark's micro-batches over a range: durations (ms) per chart bucket and the batch count."""
    batches: int
    slowest_ms: TimeSeries                # the longest batch that started in each bucket
    phases_ms: list[TimeSeries]           # mean ms of each `durationMs` phase per bucket, SPARK_PHASES order


@dataclass(frozen=True)
class IngressView:
    """What the ingress set aside and how long it was muted over a range."""
    bad_by_reason: list[TimeSeries]       # frames per bucket, one series per reason category
    bad_frames: int                       # in the range
    muted_share: TimeSeries               # share of each bucket (0..1) the ingress' sockets were muted
    muted_s: float                        # seconds muted in the range
    mute_episodes: int                    # mutes that began in the range


class PanelStore:
    """Read-only queries of the optional measurements the job and step pages draw beside latency.

    MetricsStore (collector/query/store.py) is one and adds the latency reads; `_where`
    is the run, range and tag filter both use.
    """

    def __init__(self, client: InfluxClient):
        self.client = client

    def _where(self, run: str | RunScope, rng: TimeRange | None = None, **tags: str | None) -> tuple[str, dict]:
        """Return the filter of a job's points (a name) or one run's (`RunScope`), in a range, with tags."""
        scope, params = scope_of(run).where()
        clauses = [scope]
        for key, value in tags.items():
            if value is not None:
                clauses.append(f'"{key}" = ${key}')
                params[key] = value
        if rng is not None:
            clauses.append("time >= $start AND time < $end")
            params.update(start=format_time(rng.start_ns), end=format_time(rng.end_ns))
        return " AND ".join(clauses), params

    def backpressure_view(self, run: str | RunScope, rng: TimeRange, interval_s: int,
                          order: Sequence[str] = MARKET_SPREAD_STEPS) -> BackpressureView:
        """Return each step's latest backpressure figures in the range and their series per `interval_s` bucket.

        Rows and series follow the run's step `order` (its job's declaration), the whole
        Spark query (`job`) after them.

        One request of three statements, all aggregated by InfluxDB: the last point per
        step, the bucketed shares and backlogs, and `spark_progress`' backlog per batch
        (the job's backlog for runs whose job wrote no `backpressure` backlog).
        """
        where, params = self._where(run, rng)
        by_time = f"GROUP BY time({int(interval_s)}s)"     # an int of ours, never user input
        cols = ", ".join(f'"{f}"' for f in _BP_FIELDS)
        series = self.client.query("; ".join((
            f'SELECT {cols} FROM "{BACKPRESSURE}" WHERE {where} GROUP BY "step" ORDER BY time DESC LIMIT 1',
            f'SELECT mean("busy_share") AS "busy", mean("backpressured_share") AS "backpressured", '
            f'max("backlog") AS "backlog" FROM "{BACKPRESSURE}" WHERE {where} {by_time}, "step" fill(none)',
            f'SELECT max("backlog") AS "backlog" FROM "{SPARK_PROGRESS}" WHERE {where} {by_time} fill(none)')),
            params)
        latest: list[StepBackpressure] = []
        per_step: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        progress_backlog: dict[int, float] = {}
        for s in series:
            if s.name == SPARK_PROGRESS:
                progress_backlog.update((int(r["time"]), float(r["backlog"]))
                                        for r in s.rows() if r["backlog"] is not None)
                continue
            step = s.tags.get(TAG_STEP, "")
            if "status" in s.columns:
                for r in s.rows():
                    latest.append(StepBackpressure(
                        step, int(r["time"]), r["status"], _opt(r["busy_share"], float),
                        _opt(r["backpressured_share"], float), _opt(r["idle_share"], float),
                        _opt(r["backlog"], int), _opt(r["backlog_growth_per_s"], float)))
                continue
            for r in s.rows():
                for name in ("busy", "backpressured", "backlog"):
                    if r[name] is not None:
                        per_step[name][step][int(r["time"])] = float(r[name])
        if STEP_JOB not in per_step["backlog"] and progress_backlog:
            per_step["backlog"][STEP_JOB] = progress_backlog

        def as_series(name: str) -> list[TimeSeries]:
            return [TimeSeries(step, tuple(sorted(v)), tuple(v[t] for t in sorted(v)))
                    for step, v in sorted(per_step[name].items(), key=lambda kv: rank(kv[0]))]

        rank = bp_ranker(order)
        return BackpressureView(sorted(latest, key=lambda b: rank(b.step)), as_series("busy"),
                                as_series("backpressured"), as_series("backlog"), interval_s)

    def markers(self, run: str | RunScope, rng: TimeRange) -> list[Marker]:
        """Return the run's query starts and ends, its rescales and the FIRING/RESOLVED changes of alerts scoped to it."""
        where, params = self._where(run, None)
        span = {"start": format_time(rng.start_ns), "end": format_time(rng.end_ns)}
        out: list[Marker] = []
        for s in self._optional(f'SELECT "status", "end_ns" FROM "{RUNS}" WHERE {where}', params):
            for r in s.rows():
                if rng.start_ns <= int(r["time"]) < rng.end_ns:
                    out.append(Marker(int(r["time"]), "start", "query started"))
                end = r.get("end_ns")
                if end is not None and rng.start_ns <= int(end) <= rng.end_ns:
                    out.append(Marker(int(end), "end", f"query {r.get('status') or 'ended'}"))
        in_range, in_params = self._where(run, rng)
        rescales = self._optional(f'SELECT "{FIELD_FROM_SHARDS}", "{FIELD_TO_SHARDS}" FROM "{JOB_RESCALE}" '
                                  f'WHERE {in_range}', in_params)
        for s in rescales:
            for r in s.rows():
                out.append(Marker(int(r["time"]), "rescale",
                                  f"rescaled {r.get(FIELD_FROM_SHARDS)} → {r.get(FIELD_TO_SHARDS)} shards"))
        alerts = self._optional(f'SELECT "state", "scope" FROM "{ALERT_EVENTS}" WHERE time >= $start AND '
                                'time < $end GROUP BY "rule"', span)
        for s in alerts:
            rule = s.tags.get(TAG_RULE, "")
            for r in s.rows():
                scope = str(r.get("scope") or "").split(" · ")[0]
                if r.get("state") in ("FIRING", "RESOLVED") and scope in (f"job {scope_of(run).job}", "any job"):
                    out.append(Marker(int(r["time"]), r["state"].lower(), f"{rule} {r['state']}"))
        return sorted(out, key=lambda m: m.time_ns)

    def _optional(self, q: str, params: dict | None) -> list:
        """Run a query of an optional measurement: a refusal (e.g. no such database yet) reads as none."""
        try:
            return self.client.query(q, params)
        except InfluxError as e:
            if e.status is None:
                raise
            return []

    def batch_view(self, run: str | RunScope, rng: TimeRange, interval_s: int) -> BatchView:
        """Return Spark's batch durations and their phases per `interval_s` bucket (empty if none written)."""
        where, params = self._where(run, rng)
        phases = ", ".join(f'mean("{p}_ms") AS "{p}"' for p in SPARK_PHASES)
        series = self.client.query(
            f'SELECT max("batch_ms") AS "slowest", count("batch_ms") AS "batches", {phases} '
            f'FROM "{SPARK_PROGRESS}" WHERE {where} GROUP BY time({int(interval_s)}s) fill(none)', params)
        rows = [r for s in series for r in s.rows()]
        slowest = [(int(r["time"]), float(r["slowest"])) for r in rows if r["slowest"] is not None]
        per_phase = [_as_series(p, [(int(r["time"]), float(r[p])) for r in rows if r.get(p) is not None])
                     for p in SPARK_PHASES]
        return BatchView(sum(int(r["batches"] or 0) for r in rows), _as_series("slowest batch", slowest),
                         [s for s in per_phase if s.values])

    def ingress_view(self, run: str | RunScope, rng: TimeRange, interval_s: int) -> IngressView:
        """Return the bad frames per reason and the muted time of a run's ingress per `interval_s` bucket.

        Both are cumulative counters in InfluxDB: a bucket's figure is its growth over the
        bucket before (for the first, the last point before the range). Runs written before
        `ingress_bad` existed show their total `bad` as one series, "all reasons".
        """
        where, params = self._where(run, rng)
        by_time = f"GROUP BY time({int(interval_s)}s)"
        before = '"run" = $run AND time < $start'
        series = self.client.query("; ".join((
            f'SELECT max("frames") AS "frames" FROM "{INGRESS_BAD}" WHERE {where} {by_time}, "reason" fill(none)',
            f'SELECT last("frames") AS "frames" FROM "{INGRESS_BAD}" WHERE {before} GROUP BY "reason"',
            f'SELECT max("bad") AS "bad", max("muted_seconds") AS "muted", max("mute_episodes") AS "episodes" '
            f'FROM "{INGRESS}" WHERE {where} {by_time} fill(none)',
            f'SELECT last("bad") AS "bad", last("muted_seconds") AS "muted", last("mute_episodes") AS "episodes" '
            f'FROM "{INGRESS}" WHERE {before}')), params)
        # statements 2 and 4 (the counters before the range) hold a single row at or before the start
        bad: dict[str, list[tuple[int, float]]] = defaultdict(list)
        bad_before: dict[str, float] = {}
        status: list[dict] = []
        status_before: dict = {}
        for s in series:
            for r in s.rows():
                prior = int(r["time"]) < rng.start_ns
                if s.name == INGRESS_BAD and r["frames"] is not None:
                    if prior:
                        bad_before[s.tags.get(TAG_REASON, "")] = float(r["frames"])
                    else:
                        bad[s.tags.get(TAG_REASON, "")].append((int(r["time"]), float(r["frames"])))
                elif s.name == INGRESS:
                    status_before = r if prior else status_before
                    status += [] if prior else [r]

        def growth(field: str) -> list[tuple[int, float]]:
            return counter_growth([(int(r["time"]), float(r[field])) for r in status if r[field] is not None],
                                  _opt(status_before.get(field), float))

        by_reason = {k: counter_growth(v, bad_before.get(k)) for k, v in bad.items()}
        if not by_reason and any(v for _, v in growth("bad")):
            by_reason = {"all reasons": growth("bad")}
        muted = growth("muted")
        per_reason = [_as_series(k, rows) for k, rows in sorted(by_reason.items())]
        return IngressView(per_reason, int(sum(sum(s.values) for s in per_reason)),
                           _as_series("muted", [(t, min(1.0, v / interval_s)) for t, v in muted]),
                           sum(v for _, v in muted), int(sum(v for _, v in growth("episodes"))))


def bp_order(order: Sequence[str]) -> tuple[str, ...]:
    """Return the backpressure panel's rows: the run's steps in order (start-to-end is no step of its own), then the query."""
    return tuple(s for s in order if s != START_TO_END) + (STEP_JOB,)


def bp_ranker(order: Sequence[str]):
    """Return the sort key of backpressure rows for a run whose steps come in `order`."""
    rows = bp_order(order)
    return lambda step: (rows.index(step) if step in rows else len(rows), step)


def _opt(value, kind):
    return None if value is None else kind(value)


def counter_growth(values: Sequence[tuple[int, float]], before: float | None) -> list[tuple[int, float]]:
    """Return per-bucket growth of a cumulative counter; a drop is a restarted process counting from 0."""
    out, prev = [], before
    for t, v in values:
        out.append((t, v if prev is None or v < prev else v - prev))
        prev = v
    return out


def _as_series(name: str, rows: Sequence[tuple[int, float]]) -> TimeSeries:
    return TimeSeries(name, tuple(t for t, _ in rows), tuple(v for _, v in rows))
