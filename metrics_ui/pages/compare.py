"""Compare page: performance-test runs side by side, regressions against the first flagged.

`/compare?runs=a,b[,c...]&threshold=5`: the first run is the baseline; a later run is
flagged where its start-to-end p99 is higher, or its throughput lower, by more than the
threshold (percent, 5 by default, adjustable on the page).
"""
from __future__ import annotations

from datetime import datetime, timezone
from urllib.parse import quote, urlencode

import dash
from dash import Input, Output, callback, dcc, html

from collector.bins import format_ns
from collector.influx import InfluxError

from metrics_ui import components as c
from metrics_ui import compare_figures as cf
from metrics_ui.bench_data import (DEFAULT_THRESHOLD, BenchRun, BenchStore, parse_runs, parse_threshold,
                                   regressions)

dash.register_page(__name__, path="/compare", title="Compare runs · Market Spread metrics", name="Compare")

COMPARE_PICKER = "compare-picker"
COMPARE_ASKED = "compare-asked"
COMPARE_THRESHOLD = "compare-threshold"
COMPARE_BANNER = "compare-banner"
COMPARE_LINK = "compare-link"
COMPARE_SUMMARY = "compare-summary"
COMPARE_STEPS = "compare-steps"
COMPARE_LATENCY = "compare-latency"
COMPARE_THROUGHPUT = "compare-throughput"
COMPARE_CPU = "compare-cpu"
COMPARE_MEMORY = "compare-memory"
SUMMARY_HEADER = ("run", "label", "against the baseline", "throughput (events/s)", "p50 start-to-end",
                  "p99 start-to-end", "offered (events/s)", "job CPU mean (% of a core)", "job RSS max", "commit",
                  "started (UTC)", "machine")
STEPS_HEADER = ("step", "run", "events", "p50", "p90", "p95", "p99", "p99.9", "max")
_MIB = 2**20


def layout(runs: str | None = None, threshold: str | None = None, **_query) -> html.Div:
    """Return the compare page; the runs and threshold come from the URL's query."""
    return html.Div([
        dcc.Store(id=COMPARE_ASKED, data=parse_runs(runs)),
        html.Div([dcc.Link("← runs", href="/"), html.H2("Compare performance-test runs")], className="page-head"),
        html.Div([
            html.Label("Runs (the first is the baseline): ", htmlFor=COMPARE_PICKER),
            dcc.Dropdown(id=COMPARE_PICKER, options=[{"label": r, "value": r} for r in parse_runs(runs)],
                         value=parse_runs(runs), multi=True, placeholder="pick runs recorded by marketspread bench",
                         className="compare-picker"),
            html.Label(" regression threshold (%): ", htmlFor=COMPARE_THRESHOLD),
            dcc.Input(id=COMPARE_THRESHOLD, type="number", min=0, step=0.5, debounce=True,
                      value=threshold if threshold is not None else DEFAULT_THRESHOLD * 100,
                      className="compare-threshold"),
            html.A("link to this comparison", id=COMPARE_LINK, href="/compare", className="compare-link"),
        ], className="compare-controls"),
        html.Div(id=COMPARE_BANNER),
        html.Div(c.table(SUMMARY_HEADER, [], empty="loading…"), id=COMPARE_SUMMARY),
        dcc.Graph(id=COMPARE_LATENCY, figure=cf.empty_figure("Start-to-end latency by percentile", "loading…")),
        html.H3("Latency per step over the measurement window"),
        html.Div(id=COMPARE_STEPS),
        dcc.Graph(id=COMPARE_THROUGHPUT, figure=cf.empty_figure("Throughput", "loading…")),
        html.Div([dcc.Graph(id=COMPARE_CPU, figure=cf.empty_figure("CPU", "loading…")),
                  dcc.Graph(id=COMPARE_MEMORY, figure=cf.empty_figure("Memory", "loading…"))], className="grid2"),
    ])


@callback(Output(COMPARE_PICKER, "options"), Input(COMPARE_ASKED, "data"))
def load_choices(asked):
    """Offer every recorded run in the picker, newest first (and the URL's unknown names, to report them)."""
    try:
        listing = BenchStore(c.store().client).listing()
    except InfluxError:
        return dash.no_update              # the main callback shows the banner
    options = [{"label": f"{r.label} · {r.run} ({(r.commit or '?')[:8]}, {r.throughput_eps:,.0f} events/s)",
                "value": r.run} for r in listing]
    known = {r.run for r in listing}
    # the picker drops a value that is not among its options: keep the URL's unknown names visible
    return options + [{"label": f"{name} (not recorded)", "value": name} for name in asked or () if name not in known]


def _started(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _verdict(base: BenchRun, r: BenchRun, threshold: float) -> html.Span:
    if r is base:
        return html.Span("baseline", className="verdict verdict-baseline")
    found = regressions(base, r, threshold)
    if not found:
        return html.Span(f"ok (within {threshold:.1%})", className="verdict verdict-ok")
    what = {"p99": "p99", "throughput": "throughput"}
    return html.Span("REGRESSION: " + ", ".join(f"{what[g.metric]} {g.worse_by:.1%} worse" for g in found),
                     className="verdict verdict-regression")


def _summary_row(base: BenchRun, r: BenchRun, threshold: float) -> list:
    e2e = next((s for s in r.steps if s.step == "start-to-end"), None)
    cpu, rss = r.mean(r.cpu, "job"), r.peak(r.rss, "job")
    return [dcc.Link(r.run, href=f"/run/{quote(r.run, safe='')}"), r.label, _verdict(base, r, threshold),
            c.fmt_rate(r.throughput_eps), c.fmt_latency(e2e.p50_ns if e2e else None),
            c.fmt_latency(e2e.p99_ns if e2e else None), f"{r.rate:,}",
            "—" if cpu is None else f"{cpu:.0f}", "—" if rss is None else f"{rss / _MIB:,.0f} MiB",
            (r.commit[:10] or "?") + (" (dirty)" if r.dirty else ""), _started(r.started_ns),
            f"{r.cores} cores, {r.cpu_model}, {r.mem_total_bytes / 2**30:.1f} GiB"]


def _step_rows(runs: list[BenchRun]) -> list[list]:
    steps = []
    for r in runs:
        steps += [s.step for s in r.steps if s.step not in steps]
    rows = []
    for step in steps:
        for r in runs:
            s = next((s for s in r.steps if s.step == step), None)
            if s is not None:
                rows.append([step, r.label, f"{s.count:,}", *(format_ns(v) for v in
                             (s.p50_ns, s.p90_ns, s.p95_ns, s.p99_ns, s.p999_ns, s.max_ns))])
    return rows


@callback(Output(COMPARE_SUMMARY, "children"), Output(COMPARE_STEPS, "children"),
          Output(COMPARE_LATENCY, "figure"), Output(COMPARE_THROUGHPUT, "figure"), Output(COMPARE_CPU, "figure"),
          Output(COMPARE_MEMORY, "figure"), Output(COMPARE_LINK, "href"), Output(COMPARE_BANNER, "children"),
          Input(COMPARE_PICKER, "value"), Input(COMPARE_THRESHOLD, "value"))
def refresh_compare(names, threshold_pct):
    """Load the picked runs and compare them against the first."""
    keep = [dash.no_update] * 7
    names = list(names or [])
    try:
        threshold = parse_threshold(threshold_pct)
    except ValueError as e:
        return keep + [c.warning_banner(str(e))]
    try:
        runs, missing = BenchStore(c.store().client).runs(names)
    except InfluxError as e:
        return keep + [c.influx_error_banner(e)]
    banner = c.warning_banner(f"no recorded run named {', '.join(missing)}") if missing else None
    link = "/compare?" + urlencode({"runs": ",".join(names), "threshold": f"{threshold * 100:g}"})
    if not runs:
        empty = "pick runs recorded by `marketspread bench`"
        return (c.table(SUMMARY_HEADER, [], empty=empty), c.table(STEPS_HEADER, [], empty=empty),
                cf.latency_overlay_figure([]), cf.overlay_figure([], lambda r: r.throughput, "Throughput", ""),
                cf.overlay_figure([], lambda r: r.cpu, "CPU", ""), cf.overlay_figure([], lambda r: r.rss, "Memory", ""),
                link, banner)
    base = runs[0]
    return (c.table(SUMMARY_HEADER, [_summary_row(base, r, threshold) for r in runs], COMPARE_SUMMARY + "-table"),
            c.table(STEPS_HEADER, _step_rows(runs), COMPARE_STEPS + "-table"),
            cf.latency_overlay_figure(runs),
            cf.overlay_figure(runs, lambda r: r.throughput, "Throughput (processed)", "throughput (events/s)"),
            cf.overlay_figure(runs, lambda r: r.cpu, "CPU of the job and the ingress", "CPU (% of one core)"),
            cf.overlay_figure(runs, lambda r: r.rss, "Memory of the job and the ingress (RSS)", "RSS (MiB)",
                              scale=_MIB),
            link, banner)
