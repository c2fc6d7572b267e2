"""What the dashboard reads from InfluxDB, as typed records (schema: docs/METRICS.md).

A range is read from the collector's rollups (10 s .. 1 h, `rollup.latency`) where they
lie wholly inside it and exist, and from the 1-s points elsewhere (collector/query/resolution.py),
so a day costs ~50 intervals per series instead of 86,400 and stays exact: counts are
summed per chart bucket, percentiles over a range come from merging the `hdr` histograms
read, Wallaroo's bins from the merged histogram. Decoded histograms are cached by their
blob, so a live page re-decodes only the intervals that are new or re-emitted.
Every value from a user (run, step, pipeline, worker, times) is a bound parameter.

`spark_progress`, `runs` and `backpressure` are optional: a run without them still shows.
"""
from __future__ import annotations

import functools
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Sequence

from collector.backpressure import BACKPRESSURE, STEP_INGRESS, STEP_JOB
from collector.bins import UiBin, ui_bins
from collector.codec import decode
from collector.histogram import LatencyHistogram, SparseCounts
from collector.influx import RP_ROLLUP, InfluxClient, InfluxError
from collector.points import INTERVAL_TAG, interval_label

from collector.query.ranges import NS, TimeRange, anchor_ns, format_time, is_live
from collector.query.resolution import BASE_S, ROLLUPS_S, bucket_of, missing, plan, rollups_up_to

LATENCY = "latency"
START_TO_END = "start-to-end"
STEP_ORDER = ("ingress", "source", "check_market_data", "sink", START_TO_END)
#: The backpressure panel's rows: the pipeline's steps in order, then the whole Spark query.
BP_STEP_ORDER = (STEP_INGRESS, "source", "check_market_data", "sink", STEP_JOB)
_BP_FIELDS = ("status", "busy_share", "backpressured_share", "idle_share", "backlog", "backlog_growth_per_s")
SPARK_PROGRESS = "spark_progress"
WALLAROO_PERCENTILES = (50.0, 95.0, 99.0, 99.9, 99.99)
RUN_SUMMARY_WINDOW_NS = 60 * NS          # the runs page's throughput and p99: a run's last minute
_DECODE_CACHE = 50_000
SETTLE_NS = 5 * NS       # rollups that ended longer ago than this have been written (2 s grace + sending)
_SERIES_TAGS = '"step", "pipeline", "worker"'


class SeriesKey(NamedTuple):
    """The tags of one latency series within a run."""
    step: str
    pipeline: str
    worker: str


@dataclass(frozen=True)
class RunInfo:
    """One run as the runs page lists it; throughput and p99 cover its last minute of data."""
    run: str
    first_ns: int
    last_ns: int
    live: bool
    status: str                       # live, finished, or the `runs` measurement's failed
    events: int                       # start-to-end events over the whole run
    throughput_eps: float | None
    p99_ns: int | None
    backpressure: str | None          # OK / LOW / HIGH from `backpressure`, None if not written

    @property
    def duration_s(self) -> float:
        """Seconds from the first interval's start to the end of the last one."""
        return (self.last_ns - self.first_ns) / NS + 1.0

    def anchor_ns(self, now_ns: int) -> int:
        """Return where this run's relative time ranges end."""
        return anchor_ns(self.last_ns, now_ns)


@dataclass(frozen=True)
class GroupStats:
    """Latency percentiles and throughput of one row of a breakdown table over a range."""
    label: str
    events: int
    p50_ns: int
    p95_ns: int
    p99_ns: int
    eps_min: float | None
    eps_median: float | None
    eps_max: float | None


class TimeSeries(NamedTuple):
    """Values over time: `times_ns[i]` is the start of the bucket holding `values[i]`."""
    name: str
    times_ns: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class JobView:
    """Everything the job page shows for one run and range."""
    events: int
    steps: list[GroupStats]
    pipelines: list[GroupStats]
    workers: list[GroupStats]
    throughput: list[TimeSeries]          # events/s of start-to-end, one series per pipeline
    percentiles: list[TimeSeries]         # start-to-end p50/p99/p99.9 over time (max over workers)
    interval_s: int


@dataclass(frozen=True)
class StepView:
    """Everything the step page shows for one step of a run over a range."""
    events: int
    bins: list[UiBin]
    hist: LatencyHistogram
    percentiles: dict[float, int]
    throughput: list[TimeSeries]          # events/s, one series per pipeline
    workers: list[GroupStats]
    interval_s: int


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
    latest: list[StepBackpressure]        # in BP_STEP_ORDER, unknown steps last
    busy: list[TimeSeries]                # busy share 0..1 per step
    backpressured: list[TimeSeries]       # backpressured share 0..1 per step
    backlog: list[TimeSeries]             # events per step; the job's from `spark_progress` if it wrote none
    interval_s: int


@functools.lru_cache(maxsize=_DECODE_CACHE)
def _decode_sparse(blob: str) -> SparseCounts:
    # sparse: a dense histogram is 270 KB, an interval's buckets a few KB
    return decode(blob).to_sparse()


def merge_blobs(blobs: Iterable[str]) -> LatencyHistogram:
    """Return the sum of HdrHistogram V2 blobs (cached decodes)."""
    hist = LatencyHistogram()
    for b in blobs:
        if b:
            hist.add_sparse(_decode_sparse(b))
    return hist


def rate_stats(rates: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """Return (min, median, max) of per-interval rates; Nones when there are none."""
    if not rates:
        return None, None, None
    return min(rates), statistics.median(rates), max(rates)


def group_stats(label: str, hist: LatencyHistogram, rates: Sequence[float]) -> GroupStats:
    """Build one table row from a merged histogram and its per-interval rates."""
    p = hist.percentiles((50.0, 95.0, 99.0))
    return GroupStats(label, hist.total_count, p[50.0], p[95.0], p[99.0], *rate_stats(rates))


def _step_rank(step: str) -> tuple[int, str]:
    return (STEP_ORDER.index(step) if step in STEP_ORDER else len(STEP_ORDER), step)


def _bp_rank(step: str) -> tuple[int, str]:
    return (BP_STEP_ORDER.index(step) if step in BP_STEP_ORDER else len(BP_STEP_ORDER), step)


def _opt(value, kind):
    return None if value is None else kind(value)


class MetricsStore:
    """Read-only queries of the `latency` (and optional Spark) measurements of one database."""

    def __init__(self, client: InfluxClient):
        self.client = client
        self._rollups = True
        self._finished_events: dict[str, tuple[tuple[int, int], int, float]] = {}

    # -- helpers

    def _where(self, run: str, rng: TimeRange | None = None, **tags: str | None) -> tuple[str, dict]:
        clauses, params = ['"run" = $run'], {"run": run}
        for key, value in tags.items():
            if value is not None:
                clauses.append(f'"{key}" = ${key}')
                params[key] = value
        if rng is not None:
            clauses.append("time >= $start AND time < $end")
            params.update(start=format_time(rng.start_ns), end=format_time(rng.end_ns))
        return " AND ".join(clauses), params

    def _blocks(self, run: str, rng: TimeRange, fields: Sequence[str], top_s: int, **tags: str | None
                ) -> dict[SeriesKey, list[tuple[int, list]]]:
        """Return {series: [(interval start ns, field values)]} covering the range exactly.

        Rollups no coarser than `top_s` where they exist, 1-s points elsewhere
        (collector/query/resolution.py). One request reads every length at once; only rollups
        found missing (a restart, old data) cost another round, for finer lengths.
        """
        where, params = self._where(run, None, **tags)
        cols = ", ".join(f'"{f}"' for f in fields)
        lengths = rollups_up_to(top_s) if self._rollups else ()
        out: dict[SeriesKey, list[tuple[int, list]]] = defaultdict(list)
        pending = [(rng, 0)]
        settled = time.time_ns() - SETTLE_NS
        while pending:
            reads = plan(pending, lengths, settled)
            stmts, p = [], dict(params)
            for i, r in enumerate(reads):
                span = f"time >= $s{i} AND time < $e{i}"
                p[f"s{i}"], p[f"e{i}"] = format_time(r.span.start_ns), format_time(r.span.end_ns)
                if r.size_s == BASE_S:
                    stmts.append(f'SELECT {cols} FROM "{LATENCY}" WHERE {where} AND {span} GROUP BY {_SERIES_TAGS}')
                else:
                    p[f"i{i}"] = interval_label(r.size_s * NS)
                    stmts.append(f'SELECT {cols} FROM "{RP_ROLLUP}"."{LATENCY}" WHERE {where} AND '
                                 f'"{INTERVAL_TAG}" = $i{i} AND {span} GROUP BY "{INTERVAL_TAG}", {_SERIES_TAGS}')
            try:
                series = self.client.query("; ".join(stmts), p)
            except InfluxError as e:
                if not lengths or e.status is None or self._has_rollup_policy():
                    raise
                self._rollups, lengths = False, ()   # a database without the rollup policy: 1-s points only
                continue
            level = {interval_label(s * NS): j for j, s in enumerate(lengths)}
            present: dict[int, set[int]] = defaultdict(set)
            for s in series:
                key = SeriesKey(s.tags.get("step", ""), s.tags.get("pipeline", ""), s.tags.get("worker", ""))
                out[key].extend((int(r[0]), r[1:]) for r in s.values)
                if s.tags.get(INTERVAL_TAG):
                    present[level[s.tags[INTERVAL_TAG]]].update(int(r[0]) for r in s.values)
            pending = missing(reads, present)
        return out

    def _has_rollup_policy(self) -> bool:
        return any(row[0] == RP_ROLLUP for s in self.client.query("SHOW RETENTION POLICIES") for row in s.values)

    def _counts(self, run: str, rng: TimeRange, interval_s: int, **tags: str | None
                ) -> dict[SeriesKey, list[tuple[int, int]]]:
        """Return {series: [(bucket start ns, events)]} summed per `interval_s` bucket."""
        out = {}
        for key, rows in self._blocks(run, rng, ("count",), interval_s, **tags).items():
            buckets: dict[int, int] = defaultdict(int)
            for t, (count,) in rows:
                if count is not None:
                    buckets[bucket_of(t, interval_s)] += int(count)
            out[key] = sorted(buckets.items())
        return out

    def _histograms(self, run: str, rng: TimeRange, **tags: str | None) -> dict[SeriesKey, LatencyHistogram]:
        """Return each series' histogram merged over the range (rollups where they exist)."""
        return {key: merge_blobs(r[0] for _, r in rows)
                for key, rows in self._blocks(run, rng, ("hdr",), ROLLUPS_S[0], **tags).items()}

    # -- runs

    def ping(self) -> bool:
        """Return whether InfluxDB answers."""
        return self.client.ping()

    def run_names(self) -> list[str]:
        """Return every run with latency data."""
        series = self.client.query(f'SHOW TAG VALUES FROM "{LATENCY}" WITH KEY = "run"')
        return sorted({v[1] for s in series for v in s.values})

    def runs(self, now_ns: int, only: str | None = None, summary: bool = True,
             windows: Mapping[str, TimeRange] | None = None) -> list[RunInfo]:
        """Return every run (or just `only`), newest first; `summary`: with its last minute's figures,
        or, for a run in `windows` (a performance test's measurement window), that window's."""
        names = [only] if only is not None else self.run_names()
        if not names:
            return []
        where = '"run" = $run' if only is not None else "time > 0"
        params = {"run": only} if only is not None else None
        # first and last point per run: LIMIT 1 reads one block per series, not the whole run
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        q = "; ".join(f'SELECT "count" FROM "{LATENCY}" WHERE {where} GROUP BY "run" ORDER BY time {order} LIMIT 1'
                      for order in ("ASC", "DESC"))
        for s in self.client.query(q, params):
            run = s.tags.get("run", "")
            for t, _ in s.values[:1]:
                first[run] = min(first.get(run, int(t)), int(t))
                last[run] = max(last.get(run, int(t)), int(t))
        bp = self._backpressure(only)
        failed = self._failed_runs(only)
        out = []
        for run in names:
            if run not in first:
                continue
            live = is_live(last[run], now_ns)
            events = self._run_events(run, first[run], last[run], live)
            eps = p99 = None
            if summary:
                window = (windows or {}).get(run) or \
                    TimeRange(max(first[run], last[run] + NS - RUN_SUMMARY_WINDOW_NS), last[run] + NS)
                hist = LatencyHistogram()
                for h in self._histograms(run, window, step=START_TO_END).values():
                    hist.add(h)
                if hist.total_count:
                    eps, p99 = hist.total_count / window.seconds, hist.value_at_percentile(99.0)
            status = "failed" if run in failed else ("live" if live else "finished")
            out.append(RunInfo(run, first[run], last[run], live, status, events, eps, p99, bp.get(run)))
        return sorted(out, key=lambda r: r.last_ns, reverse=True)

    def _run_events(self, run: str, first_ns: int, last_ns: int, live: bool) -> int:
        """Return a run's start-to-end events (remembered for a minute once it has finished)."""
        known = self._finished_events.get(run)
        if known is not None and known[0] == (first_ns, last_ns) and time.monotonic() - known[2] < 60:
            return known[1]
        whole = self._blocks(run, TimeRange(first_ns, last_ns + NS), ("count",), ROLLUPS_S[0], step=START_TO_END)
        events = sum(int(c or 0) for rows in whole.values() for _, (c,) in rows)
        if not live:
            if len(self._finished_events) > 1000:
                self._finished_events.clear()
            self._finished_events[run] = ((first_ns, last_ns), events, time.monotonic())
        return events

    def run(self, run: str, now_ns: int) -> RunInfo | None:
        """Return one run without its last-minute figures (what the run's pages need); None if no data."""
        found = self.runs(now_ns, only=run, summary=False)
        return found[0] if found else None

    def _backpressure(self, only: str | None) -> dict[str, str]:
        where, params = ('WHERE "run" = $run AND "step" = \'job\'', {"run": only}) if only else \
            ("WHERE \"step\" = 'job'", None)
        try:
            series = self.client.query(f'SELECT last("status") FROM "backpressure" {where} GROUP BY "run"', params)
        except InfluxError as e:
            if e.status is None:
                raise
            return {}
        return {s.tags.get("run", ""): s.values[-1][1] for s in series if s.values}

    def _failed_runs(self, only: str | None) -> set[str]:
        where, params = ('WHERE "run" = $run', {"run": only}) if only else ("", None)
        try:
            series = self.client.query(f'SELECT last("status") FROM "runs" {where} GROUP BY "run"', params)
        except InfluxError as e:
            if e.status is None:
                raise
            return set()
        return {s.tags.get("run", "") for s in series if s.values and s.values[-1][1] == "failed"}

    # -- job and step pages

    def steps(self, run: str) -> list[str]:
        """Return the steps a run has data for, in pipeline order."""
        series = self.client.query(f'SHOW TAG VALUES FROM "{LATENCY}" WITH KEY = "step" WHERE "run" = $run',
                                   {"run": run})
        return sorted({v[1] for s in series for v in s.values}, key=_step_rank)

    def job_view(self, run: str, rng: TimeRange, interval_s: int) -> JobView:
        """Return the job page's tables and series for one run over a range."""
        hists = self._histograms(run, rng)
        counts = self._counts(run, rng, interval_s)

        def rollup(keyf, keep=lambda k: True, order=lambda label: label):
            merged: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
            per_time: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
            for k, h in hists.items():
                if keep(k):
                    merged[keyf(k)].add(h)
            for k, rows in counts.items():
                if keep(k):
                    for t, v in rows:
                        per_time[keyf(k)][t] += v
            return [group_stats(label, merged[label], [v / interval_s for v in per_time[label].values()])
                    for label in sorted(merged, key=order)]

        is_e2e = lambda k: k.step == START_TO_END  # noqa: E731
        steps = rollup(lambda k: k.step, order=_step_rank)
        pipelines = rollup(lambda k: k.pipeline, is_e2e)
        workers = rollup(lambda k: f"{k.worker} · {k.step}", order=lambda s: (s.split(" · ")[0],
                                                                                _step_rank(s.split(" · ")[-1])))
        throughput = _rate_series({k: v for k, v in counts.items() if is_e2e(k)}, lambda k: k.pipeline, interval_s)
        events = sum(s.events for s in pipelines)
        return JobView(events, steps, pipelines, workers, throughput,
                       self.percentiles_over_time(run, rng, interval_s, START_TO_END), interval_s)

    def percentiles_over_time(self, run: str, rng: TimeRange, interval_s: int, step: str) -> list[TimeSeries]:
        """Return p50/p99/p99.9 per bucket: the max over the workers' (and finer intervals') values."""
        names = ("p50", "p99", "p999")
        worst: dict[str, dict[int, float]] = {n: {} for n in names}
        for rows in self._blocks(run, rng, names, interval_s, step=step).values():
            for t, values in rows:
                b = bucket_of(t, interval_s)
                for n, v in zip(names, values):
                    if v is not None and v > worst[n].get(b, -1):
                        worst[n][b] = float(v)
        return [TimeSeries(n, tuple(sorted(worst[n])), tuple(worst[n][t] for t in sorted(worst[n])))
                for n in names if worst[n]]

    def backpressure_view(self, run: str, rng: TimeRange, interval_s: int) -> BackpressureView:
        """Return each step's latest backpressure figures in the range and their series per `interval_s` bucket.

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
            step = s.tags.get("step", "")
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
                    for step, v in sorted(per_step[name].items(), key=lambda kv: _bp_rank(kv[0]))]

        return BackpressureView(sorted(latest, key=lambda b: _bp_rank(b.step)), as_series("busy"),
                                as_series("backpressured"), as_series("backlog"), interval_s)

    def step_histogram(self, run: str, step: str, rng: TimeRange, pipeline: str | None = None,
                       worker: str | None = None) -> LatencyHistogram:
        """Return one step's histogram merged over a range (and optionally one pipeline/worker)."""
        hist = LatencyHistogram()
        for h in self._histograms(run, rng, step=step, pipeline=pipeline, worker=worker).values():
            hist.add(h)
        return hist

    def bins(self, run: str, step: str, rng: TimeRange) -> list[UiBin]:
        """Return the Wallaroo UI bins of a step over a range (from its merged histogram: exact)."""
        return ui_bins(self.step_histogram(run, step, rng))

    def step_filters(self, run: str, step: str) -> tuple[list[str], list[str]]:
        """Return the pipelines and workers a step of a run has data for."""
        series = self.client.query(f'SHOW TAG VALUES FROM "{LATENCY}" WITH KEY IN ("pipeline", "worker") '
                                   'WHERE "run" = $run AND "step" = $step', {"run": run, "step": step})
        found: dict[str, set[str]] = {"pipeline": set(), "worker": set()}
        for s in series:
            for key, value in s.values:
                found.setdefault(key, set()).add(value)
        return sorted(found["pipeline"]), sorted(found["worker"])

    def step_view(self, run: str, step: str, rng: TimeRange, interval_s: int, pipeline: str | None = None,
                  worker: str | None = None) -> StepView:
        """Return the step page's data for one step of a run over a range (optionally one pipeline/worker)."""
        hists = self._histograms(run, rng, step=step, pipeline=pipeline, worker=worker)
        counts = self._counts(run, rng, interval_s, step=step, pipeline=pipeline, worker=worker)
        total = LatencyHistogram()
        by_worker: dict[str, LatencyHistogram] = defaultdict(LatencyHistogram)
        for k, h in hists.items():
            total.add(h)
            by_worker[k.worker].add(h)
        worker_rates: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for k, rows in counts.items():
            for t, v in rows:
                worker_rates[k.worker][t] += v
        workers = [group_stats(w, by_worker[w], [v / interval_s for v in worker_rates[w].values()])
                   for w in sorted(by_worker)]
        return StepView(total.total_count, ui_bins(total), total,
                        total.percentiles(WALLAROO_PERCENTILES), _rate_series(counts, lambda k: k.pipeline, interval_s),
                        workers, interval_s)


    # -- job and step pages: Spark batches, the ingress, markers

    def markers(self, run: str, rng: TimeRange) -> list[Marker]:
        """Return the run's query starts and ends and the FIRING/RESOLVED changes of alerts scoped to it."""
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
        alerts = self._optional(f'SELECT "state", "scope" FROM "{ALERT_EVENTS}" WHERE time >= $start AND '
                                'time < $end GROUP BY "rule"', span)
        for s in alerts:
            rule = s.tags.get("rule", "")
            for r in s.rows():
                scope = str(r.get("scope") or "").split(" · ")[0]
                if r.get("state") in ("FIRING", "RESOLVED") and scope in (f"job {run}", "any job"):
                    out.append(Marker(int(r["time"]), r["state"].lower(), f"{rule} {r['state']}"))
        return sorted(out, key=lambda m: m.time_ns)

    def _optional(self, q: str, params: dict) -> list:
        """Run a query of an optional measurement: a refusal (e.g. no such database yet) reads as none."""
        try:
            return self.client.query(q, params)
        except InfluxError as e:
            if e.status is None:
                raise
            return []

    def batch_view(self, run: str, rng: TimeRange, interval_s: int) -> BatchView:
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

    def ingress_view(self, run: str, rng: TimeRange, interval_s: int) -> IngressView:
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
                        bad_before[s.tags.get("reason", "")] = float(r["frames"])
                    else:
                        bad[s.tags.get("reason", "")].append((int(r["time"]), float(r["frames"])))
                elif s.name == INGRESS:
                    status_before = r if prior else status_before
                    status += [] if prior else [r]

        def growth(field: str) -> list[tuple[int, float]]:
            return _growth([(int(r["time"]), float(r[field])) for r in status if r[field] is not None],
                           _opt(status_before.get(field), float))

        by_reason = {k: _growth(v, bad_before.get(k)) for k, v in bad.items()}
        if not by_reason and any(v for _, v in growth("bad")):
            by_reason = {"all reasons": growth("bad")}
        muted = growth("muted")
        per_reason = [_as_series(k, rows) for k, rows in sorted(by_reason.items())]
        return IngressView(per_reason, int(sum(sum(s.values) for s in per_reason)),
                           _as_series("muted", [(t, min(1.0, v / interval_s)) for t, v in muted]),
                           sum(v for _, v in muted), int(sum(v for _, v in growth("episodes"))))


def _rate_series(counts: Mapping[SeriesKey, list[tuple[int, int]]], keyf, interval_s: int) -> list[TimeSeries]:
    """Sum counts per group and bucket and return events/s series, one per group."""
    grouped: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for k, rows in counts.items():
        for t, v in rows:
            grouped[keyf(k)][t] += v
    return [TimeSeries(name, tuple(sorted(g)), tuple(g[t] / interval_s for t in sorted(g)))
            for name, g in sorted(grouped.items())]



# -- records and helpers of the Spark-batch, ingress and marker reads

INGRESS = "ingress"
INGRESS_BAD = "ingress_bad"
RUNS = "runs"
ALERT_EVENTS = "alert_events"
#: `spark_progress` phases drawn stacked, in Spark's order within a trigger; `triggerExecution`
#: is their whole and is drawn as the batch duration instead.
SPARK_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


@dataclass(frozen=True)
class Marker:
    """A moment drawn across a page's time charts: a query start or end, an alert firing or resolving."""
    time_ns: int
    kind: str                             # "start", "end", "firing", "resolved"
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


def _growth(values: Sequence[tuple[int, float]], before: float | None) -> list[tuple[int, float]]:
    """Return per-bucket growth of a cumulative counter; a drop is a restarted process counting from 0."""
    out, prev = [], before
    for t, v in values:
        out.append((t, v if prev is None or v < prev else v - prev))
        prev = v
    return out


def _as_series(name: str, rows: Sequence[tuple[int, float]]) -> TimeSeries:
    return TimeSeries(name, tuple(t for t, _ in rows), tuple(v for _, v in rows))
