"""How long the dashboard takes to render a day of 1-second data.

Writes a finished run of `--hours` (default 24) of 1-second `latency` points for
`--series` (default 10: five steps x two pipelines) into a real InfluxDB (Debian's influxd,
started on a free port in a temp folder), with the rollups the collector writes beside
them (10 s, 1 min, 10 min, 1 h in the `rollup` policy), then times each page:

- data: the MetricsStore call the page's callback makes (InfluxDB queries, histogram merges);
- figures: building the page's Plotly figures and tables from that data;
- http: the whole Dash callback through the Flask test client (a POST to
  /_dash-update-component, JSON out), which is what the browser waits for; for the job page
  also its two other panels (backpressure; Spark batches and ingress), which the browser
  asks for in parallel once the first answer names the range, and a tick in which nothing
  changed (only the outputs whose source changed are built and sent).

Each is timed `--repeat` times decoding every histogram afresh ("cold": what a page costs
the first time, as if no two stored histograms were alike) and once with the decoded-
histogram cache warm (a live page's refresh); medians are reported.

Every point goes through the collector's own encoder (`collector.points.latency_point`)
and every rollup is the true merge (`LatencyHistogram.add`) of the 1-s histograms it
spans. To keep generation to minutes, each series cycles through 600 distinct 1-s
histograms (lognormal latencies, `--events-per-s` events each +-20 %), so a 10-min or
1-h rollup is the same merge every time; values vary within every 10 minutes.

    .venv/bin/python -m bench.ui_render                  # 24 h x 10 series, ~10 min
    .venv/bin/python -m bench.ui_render --hours 1        # a quick look
    .venv/bin/python -m bench.ui_render --state-dir /tmp/ui24  # keep the data; run again to re-time only

Writes bench/out/ui_render.json (`--record`: bench/results/ui_render.json). Never fails
on a timing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.output import add_record_flag, result_path, shown, write_result
from collector.aggregate import ROLLUP_INTERVALS_S, IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient, InfluxConfig, Point, ensure_database
from collector.influx.server import InfluxServer
from collector.points import latency_point
from collector.units import NS

RUN = "bench-ui-24h"
STEPS = ("ingress", "source", "check_market_data", "sink", "start-to-end")
PIPELINES = ("nbbo", "orders")
SHAPE = {"ingress": (5e4, 0.6), "source": (2e8, 0.5), "check_market_data": (3e5, 0.8),
         "sink": (1e5, 0.7), "start-to-end": (4e8, 0.4)}
POOL = 600                 # distinct 1-s histograms per series; divides every rollup up to 10 min
CHUNK = 5000


def _series(n: int) -> list[tuple[str, str, str]]:
    out = [(step, pipe, "host-a/ingress" if step == "ingress" else "host-a/p0")
           for step in STEPS for pipe in PIPELINES]
    part = 1
    while len(out) < n:                       # more series: more partitions of the state step
        out += [("check_market_data", pipe, f"host-a/p{part}") for pipe in PIPELINES]
        part += 1
    return out[:n]


def generate(client: InfluxClient, start_ns: int, seconds: int, n_series: int, eps: int, seed: int) -> dict:
    """Write the run; return what was written."""
    rng = np.random.default_rng(seed)
    raw_lines = rollup_points = 0
    events = 0
    t0 = time.perf_counter()
    for step, pipeline, worker in _series(n_series):
        median, sigma = SHAPE[step]
        pool = []
        for _ in range(POOL):
            n = int(eps * rng.uniform(0.8, 1.2))
            values = rng.lognormal(np.log(median), sigma, n).astype(np.int64) + 1
            pool.append(LatencyHistogram.from_values(values))
        fields = [latency_point(IntervalHistogram(RUN, pipeline, step, worker, 0, NS, h)).fields for h in pool]
        tags = {"run": RUN, "pipeline": pipeline, "step": step, "worker": worker}
        events += sum(fields[i % POOL]["count"] for i in range(seconds)) if step == "start-to-end" else 0
        batch: list[Point] = []
        for i in range(seconds):
            batch.append(Point("latency", tags, fields[i % POOL], start_ns + i * NS))
            if len(batch) >= CHUNK:
                raw_lines += client.write(batch)
                batch = []
        if batch:
            raw_lines += client.write(batch)
        # rollups: what the aggregator (born at the run's start, stopped at its end) emits
        end_ns = start_ns + seconds * NS
        for size_s in ROLLUP_INTERVALS_S:
            size = size_s * NS
            templates: dict[int, dict] = {}
            pts = []
            for b in range(-(-start_ns // size) * size, end_ns - size + 1, size):
                first = (b - start_ns) // NS
                key = first % POOL if size_s <= POOL else 0
                if key not in templates:
                    hist = LatencyHistogram()
                    for i in range(first, first + size_s):
                        hist.add(pool[i % POOL])
                    templates[key] = latency_point(IntervalHistogram(RUN, pipeline, step, worker, 0, size,
                                                                     hist, rollup=True))
                tpl = templates[key]
                pts.append(tpl._replace(time_ns=b))
            rollup_points += client.write(pts)
        print(f"  wrote {step}/{pipeline}/{worker}: {raw_lines:,} 1-s points, {rollup_points:,} rollups so far "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"raw_points": raw_lines, "rollup_points": rollup_points, "events_start_to_end": events,
            "write_s": round(time.perf_counter() - t0, 1)}


def ensure_run(client: InfluxClient, done: Path, hours: float, series: int, eps: int, seed: int) -> dict:
    """Write the finished run once (`done` remembers it, so a kept folder re-times only); return what was written."""
    if done.exists():
        written = json.loads(done.read_text())
        print(f"re-using the run written earlier in {done.parent}: {written}", flush=True)
        return written
    ensure_database(client)
    seconds = int(hours * 3600)
    start = (time.time_ns() // NS - seconds) * NS
    print(f"writing {seconds:,} s x {series} series to {client.url} ...", flush=True)
    written = generate(client, start, seconds, series, eps, seed)
    done.write_text(json.dumps(written))
    time.sleep(12)                   # the run is finished (no point in the last 10 s)
    return written


def _callback_body(app, prefix: str, values: dict, state: dict) -> tuple[str, dict]:
    """Return the Dash callback key and request body whose outputs start with `prefix`."""
    key = next(k for k in app.callback_map if k.startswith(f"..{prefix}"))
    cb = app.callback_map[key]
    outputs = [dict(zip(("id", "property"), o.rsplit(".", 1))) for o in key.strip(".").split("...")]
    inputs = [dict(i, value=values.get(f"{i['id']}.{i['property']}")) for i in cb["inputs"]]
    states = [dict(s, value=state.get(f"{s['id']}.{s['property']}")) for s in cb["state"]]
    return key, {"output": key, "outputs": outputs, "inputs": inputs, "state": states,
                 "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"]}


def _time(fn, repeat: int, cold=None) -> dict:
    """Time `fn` `repeat` times with every histogram decoded afresh, then once with the cache warm."""
    from collector.query import series as data
    cached = data._decode_sparse
    cold_s = []
    try:
        if cold:
            # the generated rollups repeat (the 1-s pool cycles), so an emptied cache would still
            # decode each distinct blob once only; a real day has no two alike: decode every one
            data._decode_sparse = _decode_uncached
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            cold_s.append(time.perf_counter() - t)
    finally:
        data._decode_sparse = cached
    fn()
    t = time.perf_counter()
    fn()
    warm = time.perf_counter() - t
    return {"cold_median_s": round(statistics.median(cold_s), 4), "cold_max_s": round(max(cold_s), 4),
            "warm_s": round(warm, 4), "cold_runs_s": [round(x, 4) for x in cold_s]}


def _decode_uncached(blob: str):
    from collector.codec import decode
    return decode(blob).to_sparse()


def measure(config: InfluxConfig, repeat: int) -> dict:
    """Time every page's data, figures and whole callback."""
    from metrics_ui import components as c
    from metrics_ui import figures
    from metrics_ui.app import UiConfig, create_app
    from collector.query.ranges import RANGES, resolve_range
    from collector.query.resolution import bucket_s

    app = create_app(UiConfig(influx=config))
    store = app.server.extensions[c.EXTENSION]
    http = app.server.test_client()
    assert http.get("/").status_code == 200          # Dash registers the pages' callbacks on the first request
    cold = True
    now = time.time_ns()
    info = store.run(RUN, now)
    out: dict = {"run": {"events": info.events, "first_ns": info.first_ns, "last_ns": info.last_ns,
                         "status": info.status}}

    def post(prefix, values, state):
        _, body = _callback_body(app, prefix, values, state)
        r = http.post("/_dash-update-component", json=body)
        assert r.status_code == 200, (r.status_code, r.data[:300])
        return r

    def blocks(rng, top_s, **tags):
        return sum(len(v) for v in store._blocks(RUN, rng, ("count",), top_s, **tags).values())

    out["runs page"] = {"data": _time(lambda: store.runs(time.time_ns()), repeat, cold),
                        "http": _time(lambda: post("runs-table", {"runs-interval.n_intervals": 0}, {}),
                                      repeat, cold)}
    for choice in RANGES:
        rng = resolve_range(choice, info.anchor_ns(time.time_ns()))
        interval = bucket_s(rng)
        view = store.job_view(RUN, rng, interval)

        def job_figures(view=view):
            figures.throughput_figure(view.throughput)
            figures.percentiles_over_time_figure(view.percentiles, "latency")
            for rows in (view.steps, view.pipelines, view.workers):
                c.table(c.STATS_HEADER, c.stats_rows(rows))
        out[f"job page, {choice}"] = {
            "bucket_s": interval, "intervals_read_per_histogram_pass": blocks(rng, 3600),
            "data": _time(lambda: store.job_view(RUN, rng, interval), repeat, cold),
            "figures": _time(job_figures, repeat),
            "http": _time(lambda: post("job-title", {"job-interval.n_intervals": 0, "job-range.value": choice},
                                       {"job-run.data": RUN}), repeat, cold)}
        # the job page's other panels answer the range the first callback hands them, in parallel
        answer = post("job-title", {"job-interval.n_intervals": 0, "job-range.value": choice}, {"job-run.data": RUN})
        window = answer.get_json()["response"]["job-window"]["data"]
        digests = answer.get_json()["response"]["job-digests"]["data"]
        # a tick whose figures and tables did not change: the queries, digests, and a few bytes back
        out[f"job page, {choice}"]["http tick, nothing changed"] = _time(
            lambda: post("job-title", {"job-interval.n_intervals": 1, "job-range.value": choice},
                         {"job-run.data": RUN, "job-digests.data": digests}), repeat, cold)
        opened = {"job-window.data": window, "job-bp-open.data": True, "job-spark-open.data": True,
                  "job-ingress-open.data": True}          # their rows open: the charts made too
        for panel, name in (("job-backpressure", "job-backpressure"), ("job-spark-charts", "job-batches")):
            out[f"job page, {choice}"][f"http {name} panel"] = _time(
                lambda panel=panel: post(panel, opened, {"job-run.data": RUN}), repeat, cold)
        sview = store.step_view(RUN, "start-to-end", rng, interval)

        def step_figures(v=sview):
            figures.bins_figure(v.bins)
            figures.percentile_curve_figure(v.hist, v.percentiles)
            figures.throughput_figure(v.throughput)
        out[f"step page, {choice}"] = {
            "bucket_s": interval,
            "data": _time(lambda: store.step_view(RUN, "start-to-end", rng, interval), repeat, cold),
            "figures": _time(step_figures, repeat),
            "http": _time(lambda: post("step-summary", {"step-interval.n_intervals": 0, "step-range.value": choice},
                                       {"step-key.data": {"run": RUN, "step": "start-to-end"}}), repeat, cold)}
    out["csv export, whole run"] = {"http": _time(lambda: http.get(f"/export/{RUN}/start-to-end.csv"),
                                                  repeat, cold)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ui_render", description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--series", type=int, default=10)
    ap.add_argument("--events-per-s", type=int, default=2000, help="events per series and second")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--state-dir", type=Path, default=None,
                    help="keep InfluxDB's data here; a later run with the same folder re-times without writing")
    add_record_flag(ap)
    args = ap.parse_args(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ui-render-") as tmp:
        state = args.state_dir or Path(tmp)
        done = state / "written.json"
        server = InfluxServer(state, port=0)
        server.start()
        try:
            config = server.config(db="bench_ui")
            client = InfluxClient(config)
            written = ensure_run(client, done, args.hours, args.series, args.events_per_s, args.seed)
            pages = measure(config, args.repeat)
        finally:
            server.stop()
    result = {"benchmark": "ui_render", "loadavg_at_end": os.getloadavg(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "settings": vars(args), "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load,
                                                  "python": platform.python_version()},
              "written": written, "pages": pages}
    print(f"\n{'page':32} {'data cold':>10} {'figures':>9} {'http cold':>10} {'http warm':>10}")
    for name, p in pages.items():
        if name == "run":
            continue
        cell = lambda k, f="cold_median_s": f"{p[k][f]:.3f}" if k in p else "—"  # noqa: E731
        print(f"{name:32} {cell('data'):>10} {cell('figures'):>9} {cell('http'):>10} {cell('http', 'warm_s'):>10}")
    path = write_result(result, result_path("ui_render", args.record, stamped=False), indent=2, default=str)
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
