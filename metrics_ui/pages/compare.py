"""Compare page: performance-test runs side by side, judged against the first beyond their noise.

`/compare?runs=a,b[,c...]&threshold=5&group=1`: the first run is the baseline. A later run
(or, with `group=1`, the runs of one label together) is flagged only where its per-second
start-to-end p99s or throughputs differ from the baseline's significantly (a block-bootstrap
interval of the ratio of medians and a Mann-Whitney test, collector/query/compare_stats.py) and
by more than the threshold (percent, 5 by default); otherwise the page says "no significant
difference". Every figure covers each run's measurement window, as on the runs page.
"""
from __future__ import annotations

from datetime import datetime, timezone
from urllib.parse import quote, urlencode

import dash
from dash import Input, Output, State, callback, dcc, html

from collector.bins import format_ns
from collector.influx import InfluxError
from collector.vocabulary import STEP_E2E

from metrics_ui import components as c
from metrics_ui import compare_figures as cf
from metrics_ui import query_compare
from collector.query.bench_runs import DEFAULT_THRESHOLD, BenchRun, BenchStore, compare_runs, group_by_label, parse_runs, parse_threshold
from collector.query.compare_stats import IMPROVEMENT, NOT_ENOUGH, REGRESSION, Comparison

dash.register_page(__name__, path="/compare", title=f"Compare runs · {c.PRODUCT}", name="Compare")

COMPARE_PICKER = "compare-picker"
MAX_COMPARED = 50                      # runs compared at once (each is a few queries)
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
COMPARE_GROUP = "compare-group"
COMPARE_VERDICTS = "compare-verdicts"
COMPARE_PARAM_ERROR = "compare-param-error"
VERDICT_HEADER = ("runs", "metric", "baseline median", "median", "ratio", "95 % interval", "p-value", "verdict")
SUMMARY_HEADER = ("run", "label", "against the baseline", "throughput (events/s)", "p50 start-to-end",
                  "p99 start-to-end", "offered (events/s)", "job CPU mean (% of a core)", "job RSS max", "commit",
                  "started (UTC)", "machine")
STEPS_HEADER = ("step", "run", "events", "p50", "p90", "p95", "p99", "p99.9", "max")
_MIB = 2**20


def _threshold_from_url(threshold: str | None) -> tuple[float, str | None]:
    """Return the URL's threshold in percent, or the default and a message saying why it was not used."""
    if threshold is None:
        return DEFAULT_THRESHOLD * 100, None
    try:
        return parse_threshold(threshold) * 100, None
    except ValueError as e:
        return DEFAULT_THRESHOLD * 100, f"{e}; using {DEFAULT_THRESHOLD * 100:g} %"


def layout(runs: str | None = None, threshold: str | None = None, group: str | None = None,
           query_runs: str | None = None, **_query) -> html.Div:
    """Return the compare page, filled; the runs, threshold and grouping come from the URL's query.

    The callbacks' own functions fill it, so the browser draws each chart once, with no round
    of callbacks before it: they answer the user's picks.
    """
    pct, error = _threshold_from_url(threshold)
    asked, grouping = parse_runs(runs), ["group"] if group in ("1", "true", "yes") else []
    choices = load_choices(asked)
    filled = refresh_compare(asked, pct, grouping, error)
    loading = (c.table(SUMMARY_HEADER, [], empty="loading…"), c.table(VERDICT_HEADER, [], empty="loading…"), None,
               cf.empty_figure("Start-to-end latency by percentile", "loading…"), cf.empty_figure("Throughput", "loading…"),
               cf.empty_figure("CPU", "loading…"), cf.empty_figure("Memory", "loading…"), "/compare", None)
    (summary, verdicts, steps, latency, throughput, cpu, memory, link, banner) = (
        d if v is dash.no_update else v for v, d in zip(filled, loading))
    return html.Div([
        dcc.Store(id=COMPARE_ASKED, data=asked),
        dcc.Store(id=COMPARE_PARAM_ERROR, data=error),
        html.Div([dcc.Link("← runs", href="/"), html.H2("Compare performance-test runs")], className="page-head"),
        query_compare.section(query_runs),
        html.Div([
            html.Label("Runs (the first is the baseline): ", htmlFor=COMPARE_PICKER),
            dcc.Dropdown(id=COMPARE_PICKER,
                         options=[{"label": r, "value": r} for r in asked] if choices is dash.no_update else choices,
                         value=asked, multi=True, placeholder="pick runs recorded by marketspread bench",
                         className="compare-picker"),
            html.Label(" regression threshold (%): ", htmlFor=COMPARE_THRESHOLD),
            dcc.Input(id=COMPARE_THRESHOLD, type="number", min=0, step=0.5, debounce=True, value=pct,
                      className="compare-threshold"),
            dcc.Checklist(id=COMPARE_GROUP, options=[{"label": " group runs of one label", "value": "group"}],
                          value=grouping, inline=True,
                          className="compare-group"),
            html.A("link to this comparison", id=COMPARE_LINK, href=link, className="compare-link"),
        ], className="compare-controls"),
        html.Div(banner, id=COMPARE_BANNER),
        html.Div(summary, id=COMPARE_SUMMARY),
        html.H3("Against the baseline, beyond the runs' own noise"),
        html.P("Medians of the 1-s start-to-end p99s and throughputs of each measurement window. A difference "
               "counts only when the 95 % interval of the ratio (block bootstrap, 5-s blocks; runs resampled "
               "first when grouped) excludes 1 and a Mann-Whitney test gives p < 0.05.", className="hint"),
        html.Div(verdicts, id=COMPARE_VERDICTS),
        dcc.Graph(id=COMPARE_LATENCY, figure=latency),
        html.H3("Latency per step over the measurement window"),
        html.Div(steps, id=COMPARE_STEPS),
        dcc.Graph(id=COMPARE_THROUGHPUT, figure=throughput),
        html.Div([dcc.Graph(id=COMPARE_CPU, figure=cpu), dcc.Graph(id=COMPARE_MEMORY, figure=memory)],
                 className="grid2"),
    ])


@callback(Output(COMPARE_PICKER, "options"), Input(COMPARE_ASKED, "data"), prevent_initial_call=True)
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


def _ratio_text(x: Comparison) -> tuple[str, str]:
    if x.ratio is None:
        return "—", "—"
    interval = "—" if x.ci_low is None else f"×{x.ci_low:.3f} – ×{x.ci_high:.3f}"
    return f"×{x.ratio:.3f}", interval


def _verdict_text(x: Comparison, threshold: float) -> str:
    change = "" if x.ratio is None else f" {abs(x.ratio - 1):.1%} {'worse' if _worse(x) else 'better'}"
    if x.verdict == REGRESSION:
        return f"REGRESSION: {x.metric}{change}"
    if x.verdict == IMPROVEMENT:
        return f"improvement: {x.metric}{change}"
    if x.verdict == NOT_ENOUGH:
        return f"{x.metric}: not enough samples ({min(x.n_base, x.n_run)}) for a verdict"
    if x.significant:
        return f"{x.metric}: within {threshold:.1%}{change}"
    return f"{x.metric}: no significant difference"


def _worse(x: Comparison) -> bool:
    return x.ratio is not None and ((x.ratio > 1) if x.metric == "p99" else (x.ratio < 1))


def _verdict(found: list[Comparison] | None, threshold: float) -> html.Span:
    if found is None:
        return html.Span("baseline", className="verdict verdict-baseline")
    worst = next((x for x in found if x.verdict == REGRESSION), None)
    kind = "regression" if worst else ("ok" if all(x.verdict != NOT_ENOUGH for x in found) else "unknown")
    return html.Span("; ".join(_verdict_text(x, threshold) for x in found), className=f"verdict verdict-{kind}")


def _verdict_rows(groups: list[list[BenchRun]], judged: list[list[Comparison]], threshold: float) -> list[list]:
    rows = []
    base = groups[0]
    for group, found in zip(groups[1:], judged):
        for x in found:
            scale = (lambda v: c.fmt_latency(int(v))) if x.metric == "p99" else c.fmt_rate
            ratio, interval = _ratio_text(x)
            rows.append([", ".join(r.run for r in group) + f" vs {', '.join(r.run for r in base)}",
                         f"{x.metric} ({x.n_base} / {x.n_run} s)",
                         "—" if x.base_median is None else scale(x.base_median),
                         "—" if x.run_median is None else scale(x.run_median), ratio, interval,
                         "—" if x.p_value is None else f"{x.p_value:.2g}",
                         html.Span(_verdict_text(x, threshold),
                                   className="verdict verdict-" + ("regression" if x.verdict == REGRESSION else "ok"))])
    return rows


def _summary_row(found: list[Comparison] | None, r: BenchRun, threshold: float) -> list:
    e2e = next((s for s in r.steps if s.step == STEP_E2E), None)
    cpu, rss = r.mean(r.cpu, "job"), r.peak(r.rss, "job")
    return [dcc.Link(r.run, href=f"/run/{quote(r.run, safe='')}"), r.label, _verdict(found, threshold),
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


@callback(Output(COMPARE_SUMMARY, "children"), Output(COMPARE_VERDICTS, "children"), Output(COMPARE_STEPS, "children"),
          Output(COMPARE_LATENCY, "figure"), Output(COMPARE_THROUGHPUT, "figure"), Output(COMPARE_CPU, "figure"),
          Output(COMPARE_MEMORY, "figure"), Output(COMPARE_LINK, "href"), Output(COMPARE_BANNER, "children"),
          Input(COMPARE_PICKER, "value"), Input(COMPARE_THRESHOLD, "value"), Input(COMPARE_GROUP, "value"),
          State(COMPARE_PARAM_ERROR, "data"), prevent_initial_call=True)
def refresh_compare(names, threshold_pct, group, url_error):
    """Load the picked runs and judge each (or each label's group) against the first."""
    # a crafted request may send one long string or thousands of names: each costs queries
    names = list(dict.fromkeys(n for n in (names if isinstance(names, list) else []) if isinstance(n, str)))
    names = names[:MAX_COMPARED]
    grouped = "group" in (group or [])
    problems = [url_error] if url_error else []
    try:
        threshold = parse_threshold(threshold_pct)
    except ValueError as e:             # still draw everything, with the default, and say so
        threshold = DEFAULT_THRESHOLD
        problems = [f"{e}; using {DEFAULT_THRESHOLD * 100:g} %"]
    link = "/compare?" + urlencode({"runs": ",".join(names), "threshold": f"{threshold * 100:g}",
                                    **({"group": "1"} if grouped else {})})
    try:
        runs, missing = BenchStore(c.store().client).runs(names)
    except InfluxError as e:
        return [dash.no_update] * 7 + [link, c.influx_error_banner(e)]
    if missing:
        problems.append(f"no recorded run named {', '.join(missing)}")
    banner = c.warning_banner(" · ".join(problems)) if problems else None
    if not runs:
        empty = "pick runs recorded by `marketspread bench`"
        return (c.table(SUMMARY_HEADER, [], empty=empty), c.table(VERDICT_HEADER, [], empty=empty),
                c.table(STEPS_HEADER, [], empty=empty),
                cf.latency_overlay_figure([]), cf.overlay_figure([], lambda r: r.throughput, "Throughput", ""),
                cf.overlay_figure([], lambda r: r.cpu, "CPU", ""), cf.overlay_figure([], lambda r: r.rss, "Memory", ""),
                link, banner)
    groups = group_by_label(runs) if grouped else [[r] for r in runs]
    if grouped and runs[0] not in groups[0]:
        groups.sort(key=lambda g: runs[0] not in g)
    judged = [compare_runs(groups[0], g, threshold) for g in groups[1:]]
    by_run = {id(r): found for g, found in zip(groups[1:], judged) for r in g}
    return (c.table(SUMMARY_HEADER, [_summary_row(by_run.get(id(r)), r, threshold) for r in runs],
                    COMPARE_SUMMARY + "-table"),
            c.table(VERDICT_HEADER, _verdict_rows(groups, judged, threshold), COMPARE_VERDICTS + "-table",
                    empty="pick a second run to compare"),
            c.table(STEPS_HEADER, _step_rows(runs), COMPARE_STEPS + "-table"),
            cf.latency_overlay_figure(runs),
            cf.overlay_figure(runs, lambda r: r.throughput, "Throughput (processed)", "throughput (events/s)"),
            cf.overlay_figure(runs, lambda r: r.cpu, "CPU of the job and the ingress", "CPU (% of one core)"),
            cf.overlay_figure(runs, lambda r: r.rss, "Memory of the job and the ingress (RSS)", "RSS (MiB)",
                              scale=_MIB),
            link, banner)
