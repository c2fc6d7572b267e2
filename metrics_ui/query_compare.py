"""The compare page's query runs side by side: `/compare?query_runs=<job>:<runId>,<job>:<runId>`.

Two (or more) runs of streaming queries, the first the baseline, each over its whole span:
how it ended, its length, rows, throughput over its last 60 s of batches, and its batches
against the trigger; a later run's throughput and mean batch time as a ratio of the baseline's.
Each run's figures are its own (collector/query/run_scope.py), whatever its query's name.
"""
from __future__ import annotations

from datetime import datetime, timezone

from dash import dcc, html

from collector.influx import InfluxError
from collector.query.ranges import TimeRange, check_name
from collector.query.resolution import bucket_s
from collector.query.run_groups import display_name, pick_run, short_id

from metrics_ui import components as c
from metrics_ui.run_links import run_url

COMPARE_QUERY_RUNS = "compare-query-runs"
MAX_QUERY_RUNS = 10
HEADER = ("run", "query", "status", "start (UTC)", "duration", "rows", "throughput\nlast 60 s", "vs baseline",
          "batches", "mean batch", "vs baseline", "overran trigger")


def parse_query_runs(text: object) -> tuple[list[tuple[str, str]], str | None]:
    """Return the (job, run id) pairs of `query_runs=` and what was wrong with it (then nothing is read)."""
    if not isinstance(text, str) or not text:
        return [], None
    pairs = []
    try:
        for part in text.split(",")[:MAX_QUERY_RUNS]:
            job, sep, rid = part.rpartition(":")
            if not sep:
                raise ValueError(f"query_runs: {part[:60]!r} is not <job>:<run id>")
            pairs.append((check_name(job, "job"), check_name(rid, "run id")))
    except ValueError as e:
        return [], str(e)
    return pairs, None


def _ratio(value: float | None, base: float | None) -> str:
    return "—" if value is None or not base else f"{value / base:.2f}×"


def section(text: object) -> html.Div | None:
    """Return the side-by-side table of the query runs named (None when none are)."""
    pairs, error = parse_query_runs(text)
    if error:
        return html.Div(c.warning_banner(error), id=COMPARE_QUERY_RUNS)
    if not pairs:
        return None
    store, now = c.store(), c.now_ns()
    rows, base_rate, base_ms, missing = [], None, None, []
    try:
        by_job = {job: store.runs(now, only=job) for job in dict.fromkeys(j for j, _ in pairs)}
        for job, rid in pairs:
            r = pick_run(by_job[job], rid)
            if r is None:
                missing.append(f"{job}:{rid}")
                continue
            span = TimeRange(r.first_ns, max(r.anchor_ns(now), r.first_ns + 1))
            batches = store.query_batch_view(r.scope, span, bucket_s(span))
            mean_ms = (sum(batches.mean_ms.values) / len(batches.mean_ms.values)) if batches.mean_ms.values else None
            if not rows:
                base_rate, base_ms = r.throughput_eps, mean_ms
            start = datetime.fromtimestamp(r.first_ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            rows.append([dcc.Link(short_id(rid), href=run_url(job, rid), title=rid), display_name(r), r.status, start,
                         c.fmt_duration(r.duration_s), f"{r.events:,}",
                         "—" if r.throughput_eps is None else f"{c.fmt_rate(r.throughput_eps)} {r.throughput_unit}",
                         "baseline" if len(rows) == 0 else _ratio(r.throughput_eps, base_rate), f"{batches.batches:,}",
                         "—" if mean_ms is None else f"{mean_ms:,.0f} ms",
                         "baseline" if len(rows) == 0 else _ratio(mean_ms, base_ms),
                         "—" if batches.share is None else f"{batches.share:.0%}"])
    except InfluxError as e:
        return html.Div(c.influx_error_banner(e), id=COMPARE_QUERY_RUNS)
    return html.Div([html.H3("Query runs (the first is the baseline)"),
                     c.warning_banner("no such run: " + ", ".join(missing)) if missing else None,
                     c.table(HEADER, rows, COMPARE_QUERY_RUNS + "-table", empty="none of these runs has data")],
                    id=COMPARE_QUERY_RUNS)
