"""How long the dashboard's pages take in a real browser, as a user sees them.

Writes (or re-uses) a finished run of `--hours` of 1-second data with its rollups into a
real InfluxDB (bench/ui_render.py's generator), starts the dashboard the way a user does
(`marketspread ui` as its own process), and loads each page `--loads` times in headless
Chromium, timing from the navigation's start until the page is complete: no Dash
callback pending, no "loading…" placeholder left, and every chart drawn by Plotly. It also
records the bytes each load transferred, and, with `--live`, the cost of a live refresh
tick: a writer appends 1-s points to a live run while the job page is open, and each tick
is timed from its first callback request to the last chart redrawn (`plotly_afterplot`),
with the bytes its responses carried. The compare page is timed with two performance-test
runs in it: synthetic records of `--compare-s` 1-s samples each, written through the bench's
own recorder (perf.record) with their start-to-end histograms in `latency`, as a real
`marketspread bench` run writes them.

    .venv/bin/python -m bench.ui_browser --hours 24 --state-dir /tmp/ui24   # ~10 min to write once
    .venv/bin/python -m bench.ui_browser --hours 1 --loads 5                 # a quick look

Writes bench/out/ui_browser.json (`--record`: bench/results/; medians and p90s). Never
fails on a timing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.request import urlopen

from bench import query_run, ui_render
from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient, InfluxConfig
from collector.influx.server import InfluxServer, free_port
from collector.points import latency_point
from collector.units import NS
from perf.record import ProgressSample, RunRecord, StepLatency, record_points
from perf.sysinfo import MachineInfo, ProcessSample


LIVE_RUN = "bench-ui-live"
COMPARE_RUNS = ("bench-ui-base", "bench-ui-next")
LOADING = "loading…"

# True once the page is complete: nothing pending in Dash's store, no placeholder, every chart drawn.
_COMPLETE_JS = """
const s = window.store && window.store.getState();
if (!s) return false;
const cb = Object.assign({}, s.callbacks || {}); delete cb.stored; delete cb.completed;
if ([].concat(...Object.values(cb)).length) return false;
if (s.isLoading) return false;
if (document.body.innerText.includes(arguments[0])) return false;
const graphs = document.querySelectorAll('.dash-graph');
for (const g of graphs) { const p = g.querySelector('.js-plotly-plot'); if (!p || !p._fullLayout) return false; }
return graphs.length + document.querySelectorAll('table').length > 0;
"""

_BYTES_JS = """
const nav = performance.getEntriesByType('navigation')[0];
let t = nav ? nav.transferSize : 0, d = nav ? nav.decodedBodySize : 0;
for (const r of performance.getEntriesByType('resource')) { t += r.transferSize; d += r.decodedBodySize; }
return [t, d];
"""

# Time each live tick: first callback request start -> last plotly_afterplot after it.
_TICK_HOOK_JS = """
window.__ticks = []; window.__plots = [];
for (const p of document.querySelectorAll('.js-plotly-plot')) p.on('plotly_afterplot', () => window.__plots.push(performance.now()));
"""
_TICK_READ_JS = """
const reqs = performance.getEntriesByType('resource').filter(r => r.name.includes('_dash-update-component'))
  .map(r => [r.startTime, r.responseEnd, r.transferSize, r.decodedBodySize]);
return [reqs, window.__plots];
"""


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    opts = Options()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=1400,1000"):
        opts.add_argument(flag)
    opts.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def load_page(driver, url: str, timeout: float = 60.0) -> dict:
    """Load `url` in a fresh tab state; return seconds until complete and bytes transferred."""
    driver.get("about:blank")
    driver.execute_script("performance.clearResourceTimings()")
    t0 = time.perf_counter()
    driver.get(url)
    while not driver.execute_script(_COMPLETE_JS, LOADING):
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"{url} not complete after {timeout:.0f} s")
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    transferred, decoded = driver.execute_script(_BYTES_JS)
    return {"seconds": seconds, "transferred_bytes": transferred, "decoded_bytes": decoded}


def _summary(values: list[float]) -> dict:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return {"median": round(statistics.median(ordered), 4), "p90": round(p90, 4),
            "min": round(ordered[0], 4), "max": round(ordered[-1], 4), "n": len(ordered)}


def _live_writer(client: InfluxClient, stop: threading.Event) -> None:
    """Append one 1-s point per series every second to a live run (what the job's shipper does)."""
    import numpy as np
    rng = np.random.default_rng(3)
    series = [(step, pipe, "host-a/p0") for step in ui_render.STEPS for pipe in ui_render.PIPELINES]
    t = time.time_ns() // NS * NS - 600 * NS
    while not stop.is_set():
        now = time.time_ns() // NS * NS - 2 * NS
        points = []
        while t <= now:
            for step, pipe, worker in series:
                median, sigma = ui_render.SHAPE[step]
                h = LatencyHistogram.from_values(rng.lognormal(np.log(median), sigma, 500).astype(np.int64) + 1)
                points.append(latency_point(IntervalHistogram(LIVE_RUN, pipe, step, worker, t, NS, h)))
            t += NS
        if points:
            client.write(points)
        stop.wait(0.5)


def measure_live(driver, base: str, client: InfluxClient, seconds: float) -> dict:
    """Open the live run's job page and time its refresh ticks for `seconds`."""
    stop = threading.Event()
    writer = threading.Thread(target=_live_writer, args=(client, stop), daemon=True)
    writer.start()
    try:
        time.sleep(3)
        load_page(driver, f"{base}/run/{LIVE_RUN}")
        driver.execute_script(_TICK_HOOK_JS)
        driver.execute_script("performance.clearResourceTimings()")
        time.sleep(seconds)
        reqs, plots = driver.execute_script(_TICK_READ_JS)
    finally:
        stop.set()
        writer.join(5)
    # group requests into ticks: a new tick starts more than 300 ms after the previous request began
    ticks, current = [], []
    for start, end, size, decoded in sorted(reqs):
        if current and start - current[-1][0] > 300:
            ticks.append(current)
            current = []
        current.append((start, end, size, decoded))
    if current:
        ticks.append(current)
    durations, sizes, bodies = [], [], []
    for i, tick in enumerate(ticks[:-1]):             # the last one may be cut by the read
        start = tick[0][0]
        nxt = ticks[i + 1][0][0]
        done = max([r[1] for r in tick] + [p for p in plots if start <= p < nxt])
        durations.append((done - start) / 1000.0)
        sizes.append(sum(r[2] for r in tick))
        bodies.append(sum(r[3] for r in tick))
    return {"ticks": len(durations), "seconds": _summary(durations) if durations else None,
            "transferred_bytes": _summary(sizes) if sizes else None,
            "decoded_bytes": _summary(bodies) if bodies else None}


def write_compare_runs(client: InfluxClient, done: Path, seconds: int, seed: int) -> dict:
    """Write two finished performance-test runs of `seconds` 1-s samples (once; `done` remembers them)."""
    import numpy as np
    if done.exists():
        return json.loads(done.read_text())
    rng = np.random.default_rng(seed)
    machine = MachineInfo("bench-host", 2, 2, "bench cpu", 8 << 30, platform.release(), platform.python_version())
    end = time.time_ns() // NS * NS - 3600 * NS
    written = {}
    for k, (run, slower) in enumerate(zip(COMPARE_RUNS, (1.0, 1.1))):
        start = end - (2 - k) * (seconds + 60) * NS
        hist, points, progress, processes = LatencyHistogram(), [], [], []
        processed = 0
        for i in range(seconds):
            t = start + i * NS
            h = LatencyHistogram.from_values(rng.lognormal(np.log(4e8 * slower), 0.4, 2000).astype(np.int64) + 1)
            hist.add(h)
            points.append(latency_point(IntervalHistogram(run, "orders", "start-to-end", "host-a/p0", t, NS, h)))
            eps = 20_000 / slower * rng.normal(1.0, 0.03)
            processed += int(eps)
            progress.append(ProgressSample(t, processed, processed, eps, eps))
            processes += [ProcessSample(name, t, cpu * rng.normal(1.0, 0.05), int(rss), 1)
                          for name, cpu, rss in (("job", 150.0 * slower, 9e8), ("ingress", 20.0, 5e7))]
        q = hist.percentiles((50.0, 90.0, 95.0, 99.0, 99.9))
        e2e = StepLatency("start-to-end", hist.total_count, q[50.0], q[90.0], q[95.0], q[99.0], q[99.9], hist.max,
                          hist.mean)
        rec = RunRecord(run=run, label=run.rsplit("-", 1)[-1], started_ns=start, window_start_ns=start,
                        window_end_ns=start + seconds * NS, git_commit="0" * 40, git_dirty=False, rate=20_000,
                        duration_s=float(seconds), warmup_s=0.0, command=["bench"], commands={}, config={},
                        machine=machine, events=processed, throughput_eps=processed / seconds,
                        ingested_eps=processed / seconds, results_received=0, steps=[e2e], progress=progress,
                        processes=processes)
        written[run] = client.write(points + record_points(rec))
    done.write_text(json.dumps(written))
    return written


def provenance(module: str, argv) -> dict:
    """Return the command line, the git commit and whether the tree had changes, for a result."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""
    return {"command": " ".join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)]),
            "git_commit": git("rev-parse", "HEAD"),
            "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def _start_ui(config: InfluxConfig, port: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, **config.as_env(), "PYTHONPATH": str(ROOT)}
    return start_server([sys.executable, "-m", "marketspread", "ui", "--port", str(port)], env,
                        f"http://127.0.0.1:{port}/", log_path, "the dashboard")


def start_server(cmd: list[str], env: dict, url: str, log_path: Path, what: str) -> subprocess.Popen:
    """Start `cmd` in a session of its own, output to `log_path`; return it once `url` answers 200."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{what} did not start; see {log_path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ui_browser", description=__doc__.split("\n")[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--series", type=int, default=10)
    ap.add_argument("--events-per-s", type=int, default=2000)
    ap.add_argument("--loads", type=int, default=10, help="loads per page")
    ap.add_argument("--live", type=float, default=30.0, help="seconds of live ticks to time (0: skip)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compare-s", type=int, default=600, help="1-s samples of each of the compare page's two runs")
    ap.add_argument("--state-dir", type=Path, default=None, help="keep InfluxDB's data here and re-use it")
    ap.add_argument("--query-hours", type=float, default=1.0,
                    help="hours of a streaming query's run (bench/query_run.py) timed beside (0: skip)")
    add_record_flag(ap)
    args = ap.parse_args(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ui-browser-") as tmp:
        state = args.state_dir or Path(tmp)
        done = state / "written.json"
        server = InfluxServer(state, port=0)
        server.start()
        ui = driver = None
        try:
            config = server.config(db="bench_ui")
            client = InfluxClient(config)
            written = ui_render.ensure_run(client, done, args.hours, args.series, args.events_per_s, args.seed)
            written["compare_runs"] = write_compare_runs(client, state / f"compare-{args.compare_s}.json",
                                                         args.compare_s, args.seed)
            if args.query_hours > 0:
                written["query_run"] = query_run.ensure_query_run(
                    client, state / f"query-{args.query_hours:g}h.json", args.query_hours, args.seed)
            port = free_port()
            ui = _start_ui(config, port, Path(tmp) / "ui.log")
            base = f"http://127.0.0.1:{port}"
            driver = _driver()
            run = ui_render.RUN
            pages = {"runs": "/", "job": f"/run/{run}", "step": f"/step/{run}/start-to-end",
                     "job, 24 h range": f"/run/{run}?range=24h", "alerts": "/alerts", "compare (empty)": "/compare",
                     "compare, 2 runs": f"/compare?runs={','.join(COMPARE_RUNS)}"}
            if args.query_hours > 0:
                q = query_run.QUERY_RUN
                pages.update({"job, any query": f"/run/{q}", "job, any query, 24 h range": f"/run/{q}?range=24h",
                              "step, any query": f"/step/{q}/{query_run.STEPS[-1]}"})
            results: dict = {}
            for name, path in pages.items():
                load_page(driver, base + path)            # the first load warms the browser's cache
                loads = [load_page(driver, base + path) for _ in range(args.loads)]
                results[name] = {"path": path, "seconds": _summary([x["seconds"] for x in loads]),
                                 "transferred_bytes": loads[-1]["transferred_bytes"],
                                 "decoded_bytes": loads[-1]["decoded_bytes"]}
                s = results[name]["seconds"]
                print(f"  {name:18} median {s['median']:.3f} s  p90 {s['p90']:.3f} s  "
                      f"{results[name]['transferred_bytes']:,} B transferred", flush=True)
            firsts = {"job": f"/run/{run}"}
            if args.query_hours > 0:
                firsts["job, any query"] = f"/run/{query_run.QUERY_RUN}"
            for name, path in firsts.items():
                cold = _driver()
                try:
                    first = load_page(cold, base + path)
                finally:
                    cold.quit()
                results[f"first visit (empty cache), {name}"] = {"seconds": round(first["seconds"], 4),
                                                                 "transferred_bytes": first["transferred_bytes"],
                                                                 "decoded_bytes": first["decoded_bytes"]}
                print(f"  first visit, {name} page: {first['seconds']:.3f} s, {first['transferred_bytes']:,} B "
                      f"transferred ({first['decoded_bytes']:,} B decoded)", flush=True)
            if args.live > 0:
                live = results["live tick, job page"] = measure_live(driver, base, client, args.live)
                if live["seconds"]:
                    print(f"  live tick ({live['ticks']} ticks): median {live['seconds']['median']:.3f} s  "
                          f"p90 {live['seconds']['p90']:.3f} s  {live['transferred_bytes']['median']:,.0f} B "
                          f"transferred per tick (median; p90 {live['transferred_bytes']['p90']:,.0f} B), "
                          f"{live['decoded_bytes']['median']:,.0f} B decoded", flush=True)
                else:
                    print(f"  live tick: {live}", flush=True)
        finally:
            if driver is not None:
                driver.quit()
            if ui is not None:
                ui.terminate()
                ui.wait(10)
            server.stop()
    result = {"benchmark": "ui_browser", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **provenance("bench.ui_browser", argv),
              "settings": {k: str(v) for k, v in vars(args).items()},
              "machine": {"cpus": os.cpu_count(), "loadavg_at_start": load, "loadavg_at_end": os.getloadavg(),
                          "python": platform.python_version()},
              "written": written, "pages": results}
    path = write_result(result, result_path("ui_browser", args.record, stamped=False), indent=2)
    print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
