"""Latency and runs as the dashboard, the alert scope checks and perf read them (schema: docs/METRICS.md).

A range is read from the collector's rollups (10 s .. 1 h, `rollup.latency`) where they
lie wholly inside it and exist, and from the 1-s points elsewhere (collector/query/resolution.py),
so a day costs ~50 intervals per series instead of 86,400 and stays exact: counts are
summed per chart bucket, percentiles over a range come from merging the `hdr` histograms
read, Wallaroo's bins from the merged histogram. Decoded histograms are cached by their
blob (collector/query/series.py), so a live page re-decodes only the intervals that are new or re-emitted.
Every value from a user (run, step, pipeline, worker, times) is a bound parameter.

`runs` and `backpressure` are optional: a run without them still lists. The job page's other
reads (backpressure, Spark batches, the ingress, markers) are in collector/query/panels.py.
"""
from __future__ import annotations

import functools
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

from collector.bins import UiBin, step_bins
from collector.histogram import LatencyHistogram
from collector.influx import RP_ROLLUP, InfluxClient, InfluxError
from collector.points import INTERVAL_TAG, interval_label

from collector.query.run_ends import STATUS_LIVE, QueryEnd, newest, query_end, run_status_of
from collector.query.spark_panels import QuerySummary, SparkPanelStore, newest_app, parse_steps
from collector.query.ranges import TimeRange, format_time, is_live
from collector.query.run_groups import pick_run
from collector.query.run_scope import RunScope, span_end
from collector.run_status import STATUS_FINISHED
from collector.units import NS
from collector.query.resolution import BASE_S, ROLLUPS_S, bucket_of, missing, plan, rollups_up_to
from collector.vocabulary import (BACKPRESSURE, LATENCY, RUNS, STEP_JOB, TAG_PIPELINE, TAG_RUN, TAG_RUN_ID, TAG_STEP,
                                  TAG_WORKER)
from collector.query.series import (MARKET_SPREAD_STEPS, START_TO_END, WALLAROO_PERCENTILES, JobView, RunInfo, SeriesKey,
                                    StepView, TimeSeries, counts_events, group_stats, last_step,
                                    merge_blobs, step_order, step_rank)

RUN_SUMMARY_WINDOW_NS = 60 * NS          # the runs page's throughput and p99: a run's last minute
SETTLE_NS = 5 * NS       # rollups that ended longer ago than this have been written (2 s grace + sending)
_SERIES_TAGS = '"step", "pipeline", "worker"'


class MetricsStore(SparkPanelStore):
    """Read-only queries of the `latency` (and optional Spark) measurements of one database."""

    def __init__(self, client: InfluxClient):
        super().__init__(client)
        self._rollups = True
        self._finished_events: dict[str, tuple[tuple[int, int], int, float]] = {}

    # -- helpers

    def _blocks(self, run: str | RunScope, rng: TimeRange, fields: Sequence[str], top_s: int, **tags: str | None
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
                key = SeriesKey(s.tags.get(TAG_STEP, ""), s.tags.get(TAG_PIPELINE, ""), s.tags.get(TAG_WORKER, ""))
                out[key].extend((int(r[0]), r[1:]) for r in s.values)
                if s.tags.get(INTERVAL_TAG):
                    present[level[s.tags[INTERVAL_TAG]]].update(int(r[0]) for r in s.values)
            pending = missing(reads, present)
        return out

    def _has_rollup_policy(self) -> bool:
        return any(row[0] == RP_ROLLUP for s in self.client.query("SHOW RETENTION POLICIES") for row in s.values)

    def _counts(self, run: str | RunScope, rng: TimeRange, interval_s: int, **tags: str | None
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

    def _histograms(self, run: str | RunScope, rng: TimeRange, **tags: str | None) -> dict[SeriesKey, LatencyHistogram]:
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
        """Return every run (or just job `only`'s), newest first; `summary`: with its last minute's figures,
        or, for a run in `windows` (a performance test's measurement window, by job), that window's.

        A run is one start of a streaming query (Spark's runId, from `runs` and `spark_progress`;
        collector/query/run_scope.py), or, for a job with `latency` points and no query runs
        (Market Spread's latency-only runs, older data), the job itself. Its status is how its
        `runs` row says it ended, or lost (collector/query/run_ends.py); a run without a row is
        live while its points are fresh, else finished. A run that records the start-to-end step (Market
        Spread's do) counts events and events/s from that latency within its span; any other run's throughput
        is the rows of its batches that started in the last 60 s before its newest batch's end,
        over 60 s (over its length when shorter), its events the rows its sources gave, its p99
        that of its last step within its span.
        """
        found = self.query_summaries(only)
        by_job: dict[str, list[QuerySummary]] = defaultdict(list)
        for g in found:
            by_job[g.run].append(g)
        where = '"run" = $run' if only is not None else "time > 0"
        params = {"run": only} if only is not None else None
        # first and last point per job and step: LIMIT 1 reads one block per series, not the whole run
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        seen: dict[str, dict[str, int]] = defaultdict(dict)
        q = "; ".join(f'SELECT "count" FROM "{LATENCY}" WHERE {where} GROUP BY "run", "step" ORDER BY time {order} '
                      'LIMIT 1' for order in ("ASC", "DESC"))
        for s in self.client.query(q, params):
            run, step = s.tags.get(TAG_RUN, ""), s.tags.get(TAG_STEP, "")
            for t, _ in s.values[:1]:
                first[run] = min(first.get(run, int(t)), int(t))
                last[run] = max(last.get(run, int(t)), int(t))
                seen[run][step] = min(seen[run].get(step, int(t)), int(t))
        if not by_job and not first:
            return []
        bp = self._backpressure(only)
        earliest: dict[str, int] = {}
        for g in found:
            earliest[g.run] = min(earliest.get(g.run, _start(g)), _start(g))
        # the job's first run also owns its untagged points from before its start (Market Spread's ingress
        # receives before its query starts); a later run's span starts at its start, where the one before it ends
        shapes = [_shape(g, seen[g.run], first.get(g.run) if _start(g) == earliest[g.run] else None)
                  for g in found]
        rated = [x for x in shapes if x.spark and x.g.last_ns is not None]
        rates = self._last_minute_rates(rated) if summary else {}
        out = [self._run_info(x, rates, bp, windows, now_ns, summary, first.get(x.g.run), last.get(x.g.run))
               for x in shapes]
        for job in sorted(set(first) - set(by_job)):
            out.append(self._latency_run(job, first[job], last[job], seen[job], bp.get((job, "")), windows, now_ns,
                                         summary))
        return sorted(out, key=lambda r: (r.last_ns, r.first_ns), reverse=True)

    def _run_info(self, x: _Shape, rates: Mapping[int, float], bp: Mapping[tuple[str, str], str],
                  windows: Mapping[str, TimeRange] | None, now_ns: int, summary: bool, lat_first: int | None,
                  lat_last: int | None) -> RunInfo:
        """Return one query run as listed: its span, status, events, throughput and p99."""
        g, scope = x.g, x.scope
        events, eps, p99 = g.rows, rates.get(id(x)), None
        lat_end = None
        if lat_first is not None and lat_last is not None and lat_last >= x.lo and \
                (scope.end_ns is None or lat_first < scope.end_ns):
            lat_end = lat_last + NS if scope.end_ns is None else min(lat_last + NS, scope.end_ns)
        if not x.spark and lat_end is not None:
            events = self._run_events(scope, x.lo, lat_end - NS, is_live(x.hi, now_ns))
        if summary and lat_end is not None and x.end_step is not None:
            window = TimeRange(max(x.lo, lat_end - RUN_SUMMARY_WINDOW_NS), lat_end)
            bench = None if x.spark else (windows or {}).get(g.run)
            if bench is not None and bench.start_ns < lat_end and bench.end_ns > x.lo:
                window = bench
            hist = LatencyHistogram()
            for h in self._histograms(scope, window, step=x.end_step).values():
                hist.add(h)
            if hist.total_count:
                p99 = hist.value_at_percentile(99.0)
                if not x.spark:
                    eps = hist.total_count / window.seconds
        hi = max(x.hi, lat_end - NS) if lat_end is not None and not x.spark else x.hi
        end = _run_end(g, lat_end if g.next_start_ns is None else None, hi, now_ns)
        query = g.queries[0] if g.queries else None
        return RunInfo(g.run, x.lo, hi, end.status == STATUS_LIVE or is_live(hi, now_ns), end.status, events,
                       eps, p99, bp.get((g.run, g.run_id or "")), g.query_id, "rows/s" if x.spark else "events/s",
                       x.end_step, x.order, query.app_id if query else None, end.ended_ns, end.error, end.seen_ns,
                       g.last_end_ns if x.spark else None, g.run_id, g.query or None, scope.end_ns)

    def _latency_run(self, job: str, lo: int, hi: int, seen: Mapping[str, int], bp: str | None,
                     windows: Mapping[str, TimeRange] | None, now_ns: int, summary: bool) -> RunInfo:
        """Return a job with latency points and no query runs as one run (Market Spread's latency-only runs)."""
        order, end_step = step_order((), seen), last_step((), seen)
        events = self._run_events(RunScope(job), lo, hi, is_live(hi, now_ns))
        eps = p99 = None
        if summary and end_step is not None:
            window = (windows or {}).get(job) or TimeRange(max(lo, hi + NS - RUN_SUMMARY_WINDOW_NS), hi + NS)
            hist = LatencyHistogram()
            for h in self._histograms(job, window, step=end_step).values():
                hist.add(h)
            if hist.total_count:
                eps, p99 = hist.total_count / window.seconds, hist.value_at_percentile(99.0)
        end = _run_end(None, hi + NS, hi, now_ns)
        return RunInfo(job, lo, hi, end.status == STATUS_LIVE or is_live(hi, now_ns), end.status, events, eps, p99,
                       bp, None, "events/s", end_step, order, None, end.ended_ns, end.error, end.seen_ns, None)

    def _last_minute_rates(self, runs: Sequence[_Shape]) -> dict[int, float]:
        """Return each query run's rows/s over its last minute of batches, by `id` (one request for all).

        The batches counted are those whose trigger started in the 60 s before the newest
        batch's end; a run shorter than that is taken over its length, first trigger to last end.
        """
        asked: list[tuple[_Shape, float]] = []
        windows = []
        for x in runs:
            g = x.g
            end = g.last_end_ns if g.last_end_ns is not None else g.last_ns
            start = max(end - RUN_SUMMARY_WINDOW_NS, g.first_ns if g.first_ns is not None else end)
            if end > start:
                asked.append((x, (end - start) / NS))
                windows.append((x.scope, start, end))
        rows = self.rows_since(windows)
        return {id(x): n / seconds for (x, seconds), n in zip(asked, rows)}

    def _run_events(self, scope: RunScope, first_ns: int, last_ns: int, live: bool) -> int:
        """Return a run's start-to-end events (remembered for a minute once it has finished)."""
        known = self._finished_events.get(scope.key)
        if known is not None and known[0] == (first_ns, last_ns) and time.monotonic() - known[2] < 60:
            return known[1]
        whole = self._blocks(scope, TimeRange(first_ns, last_ns + NS), ("count",), ROLLUPS_S[0], step=START_TO_END)
        events = sum(int(c or 0) for rows in whole.values() for _, (c,) in rows)
        if not live:
            if len(self._finished_events) > 1000:
                self._finished_events.clear()
            self._finished_events[scope.key] = ((first_ns, last_ns), events, time.monotonic())
        return events

    def run(self, run: str, now_ns: int, run_id: str | None = None) -> RunInfo | None:
        """Return one run of job `run` without its last-minute figures (what the run's pages need): Spark's run
        `run_id`, or the job's newest run; None if no data."""
        return pick_run(self.runs(now_ns, only=run, summary=False), run_id)

    def job_runs(self, run: str, now_ns: int) -> list[RunInfo]:
        """Return every run of job `run` without last-minute figures, newest first (a run's page and its list)."""
        return self.runs(now_ns, only=run, summary=False)

    def _backpressure(self, only: str | None) -> dict[tuple[str, str], str]:
        """Return the newest backpressure status of the whole query per (job, run id; "" for untagged points)."""
        where, params = (f'WHERE "run" = $run AND "step" = \'{STEP_JOB}\'', {"run": only}) if only else \
            (f"WHERE \"step\" = '{STEP_JOB}'", None)
        try:
            series = self.client.query(f'SELECT last("status") FROM "{BACKPRESSURE}" {where} GROUP BY "run", '
                                       f'"{TAG_RUN_ID}"', params)
        except InfluxError as e:
            if e.status is None:
                raise
            return {}
        return {(s.tags.get(TAG_RUN, ""), s.tags.get(TAG_RUN_ID, "")): s.values[-1][1] for s in series if s.values}

    # -- job and step pages

    def steps(self, run: str) -> list[str]:
        """Return the steps a run has data for, in its job's order (`step_order`)."""
        series = self.client.query(
            f'SELECT "count" FROM "{LATENCY}" WHERE "run" = $run GROUP BY "step" ORDER BY time ASC LIMIT 1; '
            f'SELECT "steps" FROM "{RUNS}" WHERE "run" = $run GROUP BY "query" ORDER BY time DESC LIMIT 1', {"run": run})
        seen = {s.tags.get(TAG_STEP, ""): int(s.values[0][0]) for s in series if s.name == LATENCY and s.values}
        declared = tuple(dict.fromkeys(x for s in series if s.name != LATENCY for r in s.values
                                       for x in parse_steps(r[1])))
        order = step_order(declared, seen)
        return sorted(seen, key=lambda s: step_rank(s, order))

    def job_view(self, run: str | RunScope, rng: TimeRange, interval_s: int, order: Sequence[str] = MARKET_SPREAD_STEPS,
                 end_step: str = START_TO_END) -> JobView:
        """Return the job page's tables and series for one run over a range.

        Steps follow the run's `order`; throughput, pipelines and the percentiles over
        time are those of `end_step` (start-to-end when the run records it, else its last step).
        """
        step_rank_ = functools.partial(step_rank, order=tuple(order))
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

        is_e2e = lambda k: k.step == end_step  # noqa: E731
        steps = rollup(lambda k: k.step, order=step_rank_)
        pipelines = rollup(lambda k: k.pipeline, is_e2e)
        workers = rollup(lambda k: f"{k.worker} · {k.step}", order=lambda s: (s.split(" · ")[0],
                                                                                step_rank_(s.split(" · ")[-1])))
        throughput = _rate_series({k: v for k, v in counts.items() if is_e2e(k)}, lambda k: k.pipeline, interval_s)
        events = sum(s.events for s in pipelines)
        return JobView(events, steps, pipelines, workers, throughput,
                       self.percentiles_over_time(run, rng, interval_s, end_step), interval_s)

    def percentiles_over_time(self, run: str | RunScope, rng: TimeRange, interval_s: int, step: str) -> list[TimeSeries]:
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
    def step_histogram(self, run: str | RunScope, step: str, rng: TimeRange, pipeline: str | None = None,
                       worker: str | None = None) -> LatencyHistogram:
        """Return one step's histogram merged over a range (and optionally one pipeline/worker)."""
        hist = LatencyHistogram()
        for h in self._histograms(run, rng, step=step, pipeline=pipeline, worker=worker).values():
            hist.add(h)
        return hist

    def bins(self, run: str | RunScope, step: str, rng: TimeRange) -> list[UiBin]:
        """Return a step's latency ranges over a range (`step_bins`, from its merged histogram: exact)."""
        return step_bins(self.step_histogram(run, step, rng))

    def step_filters(self, run: str, step: str) -> tuple[list[str], list[str]]:
        """Return the pipelines and workers a step of a run has data for."""
        series = self.client.query(f'SHOW TAG VALUES FROM "{LATENCY}" WITH KEY IN ("pipeline", "worker") '
                                   'WHERE "run" = $run AND "step" = $step', {"run": run, "step": step})
        found: dict[str, set[str]] = {"pipeline": set(), "worker": set()}
        for s in series:
            for key, value in s.values:
                found.setdefault(key, set()).add(value)
        return sorted(found["pipeline"]), sorted(found["worker"])

    def step_view(self, run: str | RunScope, step: str, rng: TimeRange, interval_s: int, pipeline: str | None = None,
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
        return StepView(total.total_count, step_bins(total), total,
                        total.percentiles(WALLAROO_PERCENTILES), _rate_series(counts, lambda k: k.pipeline, interval_s),
                        workers, interval_s)


@dataclass(frozen=True, eq=False)
class _Shape:
    """A query run's span, scope and steps, before its figures are read."""
    g: QuerySummary
    scope: RunScope
    lo: int
    hi: int
    spark: bool                          # counted by Spark's input rows (rows/s), not start-to-end (events/s)
    order: tuple[str, ...]
    end_step: str | None


def _start(g: QuerySummary) -> int:
    """Return a query run's start: its `runs` row's, or its first batch's."""
    return min(t for t in (g.first_ns, g.last_ns, g.started_ns) if t is not None)


def _shape(g: QuerySummary, seen: Mapping[str, int], before_ns: int | None) -> _Shape:
    """Return a query run's span (its start, or first batch, to its newest batch) and the points that are its own.

    `before_ns`: the first of its job's untagged points, which the job's first run owns even
    before its start (latency intervals are stamped at their start; the ingress receives first).
    """
    declared = g.declared_steps
    times = [t for t in (g.first_ns, g.last_ns, g.started_ns) if t is not None]
    lo, hi = min(times + ([before_ns] if before_ns is not None else [])), max(times)
    ended = g.queries[0].ended_ns if g.queries else None
    scope = RunScope(g.run, g.run_id, g.query or None, lo, span_end(ended, g.next_start_ns)) \
        if g.run_id is not None else RunScope(g.run)
    return _Shape(g, scope, lo, hi, not counts_events(seen), step_order(declared, seen), last_step(declared, seen))


def _run_end(g: QuerySummary | None, latency_end_ns: int | None, last_ns: int, now_ns: int) -> QueryEnd:
    """Return how a run ended: its queries' `runs` rows (a running one gone quiet is lost); without rows,
    live while its points are fresh, else finished.

    A query's sign of life is the newest of its heartbeat, its newest batch's end, the run's
    newest latency interval's end and its start.
    """
    ends = [query_end(q.status, q.ended_ns, q.error, newest(q.last_seen_ns, q.batch_end_ns, latency_end_ns,
                                                              q.started_ns), now_ns)
            for q in (g.queries if g is not None else ())]
    end = run_status_of(ends)
    if end is None:
        return QueryEnd(STATUS_LIVE if is_live(last_ns, now_ns) else STATUS_FINISHED, None, None, last_ns)
    return end


def _rate_series(counts: Mapping[SeriesKey, list[tuple[int, int]]], keyf, interval_s: int) -> list[TimeSeries]:
    """Sum counts per group and bucket and return events/s series, one per group."""
    grouped: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for k, rows in counts.items():
        for t, v in rows:
            grouped[keyf(k)][t] += v
    return [TimeSeries(name, tuple(sorted(g)), tuple(g[t] / interval_s for t in sorted(g)))
            for name, g in sorted(grouped.items())]

