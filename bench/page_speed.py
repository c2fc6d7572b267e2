"""The job page against Spark UI's own streaming statistics page, side by side on one live query.

Starts what a user runs: the project's InfluxDB (collector/influx/server.py), a `foreachBatch`
query at `--rate` rows/s (`examples/foreachbatch_sqlite.py`) under `marketspread watch` with
Spark's UI on (its port chosen here), and the dashboard (`marketspread ui`, its own process).
Once the query has run `--warmup` seconds, each of `--trials` rounds loads, each in a fresh
headless Chromium (Debian's chromium and chromedriver), in an order that alternates from
round to round:

- the query's job page with refresh paused (`/run/<run>?refresh=off`),
- the same page live (ticking every second, the default),
- Spark UI's statistics page of the same query (`/StreamingQuery/statistics?id=<runId>`),

each load cold (a fresh browser: empty cache) and then warm (a second navigation in the same
browser). A load is timed in the page, from its navigation's start (`performance.timeOrigin`)
to the first moment after which it stays settled for `SETTLE_MS`:

- a dashboard page is settled when Dash's store has no callback pending, its page content is
  there, no "loading…" placeholder is left, and every `.dash-graph` holds a Plotly chart with
  `_fullLayout` and one drawn `g.trace` per visible trace;
- Spark's page is settled when the document has loaded and every timeline, histogram and the
  operation-duration cell of its table holds the SVG its d3 script drew, with a path in it.

The watcher that checks this is installed in every document before the page's own scripts
(`Page.addScriptToEvaluateOnNewDocument`) and reads only the DOM, never its layout. Each load
also records its requests, bytes and, for the dashboard, each callback's server time.

    python -m bench.page_speed                    # 8 rounds (~6 min)
    python -m bench.page_speed --trials 2 --warmup 15   # a quick look

Prints the medians and the ratios job/Spark of the same run, writes bench/out/ (bench/results/
with `--record`); `--add-to FILE` adds the run to an earlier result as a further sitting, so
that repeated sittings are one file. Never fails on a timing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.request import urlopen

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from bench.ui_browser import _driver, _start_ui, provenance
from collector.influx.server import InfluxServer, free_port
from perf.sysinfo import machine_info

JOB = "foreachbatch_sqlite"
SETTLE_MS = 150
PAGES = ("job, paused", "job, live", "Spark UI")

# Installed in every document: polls every 10 ms and keeps `window.__settled`, the time (ms since
# the navigation began) from which the page has stayed complete, and `window.__done` once it has
# stayed so for SETTLE_MS. Reads the DOM and Dash's store only: no layout is forced.
WATCHER_JS = """
(function () {
  const SETTLE = %d;
  function dashDone() {
    const s = window.store && window.store.getState && window.store.getState();
    if (!s || s.isLoading) return false;
    const cb = Object.assign({}, s.callbacks || {}); delete cb.stored; delete cb.completed;
    if ([].concat(...Object.values(cb)).length) return false;
    const content = document.getElementById('_pages_content');
    if (!content || !content.firstElementChild) return false;
    if (content.textContent.includes('loading\u2026')) return false;
    const graphs = document.querySelectorAll('.dash-graph');
    for (const g of graphs) {
      const p = g.querySelector('.js-plotly-plot');
      if (!p || !p._fullLayout || !p._fullData) return false;
      const visible = p._fullData.filter(t => t.visible === true).length;
      if (p.querySelectorAll('g.trace').length < visible) return false;
    }
    return graphs.length + content.querySelectorAll('table').length > 0;
  }
  function sparkDone() {
    if (document.readyState !== 'complete') return false;
    const cells = document.querySelectorAll('[id$="-timeline"], [id$="-histogram"], #duration-area-stack');
    if (!cells.length) return false;
    for (const c of cells) { if (!c.querySelector('svg path')) return false; }
    return true;
  }
  const check = location.pathname.startsWith('/StreamingQuery/') ? sparkDone : dashDone;
  if (location.protocol !== 'http:') return;
  window.__settled = null; window.__done = false;
  const timer = setInterval(function () {
    const now = performance.now();
    if (check()) {
      if (window.__settled === null) window.__settled = now;
      if (now - window.__settled >= SETTLE) { window.__done = true; clearInterval(timer); }
    } else {
      window.__settled = null;
    }
  }, 10);
})();
""" % SETTLE_MS

# What a load fetched: its requests, bytes, and (the dashboard's) callbacks' server time and size.
_RESOURCES_JS = """
const nav = performance.getEntriesByType('navigation')[0];
const res = performance.getEntriesByType('resource');
const cbs = res.filter(r => r.name.includes('_dash-update-component'));
return {requests: res.length + 1,
        transferred: res.reduce((a, r) => a + r.transferSize, nav.transferSize),
        decoded: res.reduce((a, r) => a + r.decodedBodySize, nav.decodedBodySize),
        document_ms: nav.responseEnd, dom_content_loaded_ms: nav.domContentLoadedEventEnd,
        load_event_ms: nav.loadEventEnd, graphs: document.querySelectorAll('.js-plotly-plot').length,
        svgs: document.querySelectorAll('svg').length,
        callbacks: cbs.map(r => ({start_ms: Math.round(r.startTime), server_ms: Math.round(r.responseStart - r.requestStart),
                                  end_ms: Math.round(r.responseEnd), bytes: r.transferSize, decoded: r.decodedBodySize})),
        scripts: res.filter(r => r.initiatorType === 'script' || r.name.endsWith('.js'))
                    .map(r => [r.name.split('/').pop().split('?')[0], r.decodedBodySize, Math.round(r.responseEnd)])};
"""


def fresh_browser():
    """Return a fresh headless Chromium (an empty cache) with the settle watcher in every document."""
    driver = _driver()
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCHER_JS})
    return driver


def timed_load(driver, url: str, timeout: float = 60.0) -> dict:
    """Navigate to `url`; return when it settled (s from the navigation's start) and what it fetched."""
    driver.get("about:blank")
    driver.get(url)
    deadline = time.monotonic() + timeout
    while not driver.execute_script("return window.__done === true"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not settled after {timeout:.0f} s")
        time.sleep(0.05)
    settled = driver.execute_script("return window.__settled")
    return {"seconds": settled / 1000.0, **driver.execute_script(_RESOURCES_JS)}


def run_ids(spark_ui: str) -> list[str]:
    """Return the run ids of the active queries Spark UI's streaming tab lists."""
    with urlopen(f"{spark_ui}/StreamingQuery/", timeout=5) as r:
        html = r.read().decode("utf-8", "replace")
    active = html.split("Completed Streaming Queries", 1)[0]
    return list(dict.fromkeys(re.findall(r"statistics/?\?id=([0-9a-f\-]{36})", active)))


def wait_for_run_id(spark_ui: str, job: subprocess.Popen, log: Path, timeout: float = 180) -> str:
    """Wait until Spark UI lists one active query; return its run id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise RuntimeError(f"the job exited ({job.returncode}): see {log}")
        try:
            ids = run_ids(spark_ui)
            if ids:
                return ids[0]
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"Spark UI at {spark_ui} listed no active query in {timeout:.0f} s: see {log}")


def start_job(server: InfluxServer, work: Path, rate: int, ui_port: int) -> subprocess.Popen:
    """Start the example query under `marketspread watch`, Spark's UI on `ui_port`, until stopped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(server.config().as_env(), MS_STATE_DIR=str(work / "state"), PYSPARK_PYTHON=sys.executable,
               PYSPARK_SUBMIT_ARGS=f"--conf spark.ui.port={ui_port} --conf spark.ui.enabled=true pyspark-shell")
    cmd = [sys.executable, "-m", "marketspread", "watch", "--", str(ROOT / "examples" / f"{JOB}.py"),
           "--duration", "0", "--rate", str(rate), "--work-dir", str(work / "job")]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=(work / "job.log").open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen | None, grace: float = 30) -> None:
    """Stop a process started in a session of its own: SIGTERM, then SIGKILL to its group."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def round_order(i: int) -> tuple[str, ...]:
    """Return the pages' order in round `i`: forwards in even rounds, backwards in odd ones."""
    return PAGES if i % 2 == 0 else tuple(reversed(PAGES))


def summarise(loads: dict[str, dict[str, list[float]]]) -> dict:
    """Return the medians of each page's cold and warm loads and the ratios job/Spark UI."""
    med = {page: {kind: round(statistics.median(v), 3) for kind, v in kinds.items() if v}
           for page, kinds in loads.items()}
    spark = med.get("Spark UI", {})
    ratios = {f"{page} / Spark UI, {kind}": round(med[page][kind] / spark[kind], 2)
              for page in med if page != "Spark UI" for kind in ("cold", "warm") if kind in med[page] and spark.get(kind)}
    return {"medians_s": med, "ratios": ratios}


def table(summary: dict) -> str:
    """Return the medians and ratios as a printed table."""
    med = summary["medians_s"]
    lines = [f"{'page':14s} {'cold s':>8s} {'warm s':>8s}"]
    for page in PAGES:
        m = med.get(page, {})
        lines.append(f"{page:14s} {m.get('cold', float('nan')):8.3f} {m.get('warm', float('nan')):8.3f}")
    lines += [f"{name}: {value:.2f}" for name, value in summary["ratios"].items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.page_speed", description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=8, help="rounds of the three pages, cold then warm each")
    ap.add_argument("--rate", type=int, default=5000, help="rows per second of the query's rate source")
    ap.add_argument("--warmup", type=float, default=30.0, help="seconds the query runs before the first load")
    ap.add_argument("--add-to", type=Path, default=None,
                    help="an earlier result file: add this run to it as a further sitting (written in place)")
    add_record_flag(ap)
    args = ap.parse_args(argv)
    load_start = list(os.getloadavg())
    work = Path(tempfile.mkdtemp(prefix="page-speed-"))
    server = InfluxServer(work / "influx", port=free_port())
    job = ui = None
    loads = {page: {"cold": [], "warm": []} for page in PAGES}
    details: list[dict] = []
    server.start()
    try:
        ui_port = free_port()
        job = start_job(server, work, args.rate, ui_port)
        spark_ui = f"http://127.0.0.1:{ui_port}"
        run_id = wait_for_run_id(spark_ui, job, work / "job.log")
        dash_port = free_port()
        ui = _start_ui(server.config(), dash_port, work / "ui.log")
        print(f"query {JOB} run id {run_id}, Spark UI {spark_ui}; warming up {args.warmup:.0f} s ...", flush=True)
        time.sleep(args.warmup)
        dash = f"http://127.0.0.1:{dash_port}"
        urls = {"job, paused": f"{dash}/run/{JOB}?refresh=off", "job, live": f"{dash}/run/{JOB}",
                "Spark UI": f"{spark_ui}/StreamingQuery/statistics?id={run_id}"}
        for i in range(args.trials):
            for page in round_order(i):
                driver = fresh_browser()
                try:
                    cold = timed_load(driver, urls[page])
                    warm = timed_load(driver, urls[page])
                finally:
                    driver.quit()
                loads[page]["cold"].append(cold["seconds"])
                loads[page]["warm"].append(warm["seconds"])
                details.append({"round": i, "page": page, "cold": cold, "warm": warm})
                print(f"round {i + 1}/{args.trials} {page:12s} cold {cold['seconds']:.3f} s "
                      f"({cold['requests']} requests, {cold['transferred']:,} B), warm {warm['seconds']:.3f} s",
                      flush=True)
            if job.poll() is not None:
                raise RuntimeError(f"the job exited ({job.returncode}): see {work / 'job.log'}")
    finally:
        stop(ui, 10)
        stop(job)
        server.stop()
    summary = summarise(loads)
    print(table(summary))
    run = {**provenance("bench.page_speed", argv),
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "job": f"examples/{JOB}.py under marketspread watch", "rate_rows_s": args.rate, "warmup_s": args.warmup,
           "trials": args.trials, "settle_ms": SETTLE_MS, "run_id": run_id,
           "machine": {"cpus": os.cpu_count(), "cpu_model": machine_info().cpu_model,
                       "python": platform.python_version(), "load_avg_start": load_start,
                       "load_avg_end": list(os.getloadavg()), "shared": True},
           **summary, "loads_s": loads, "details": details}
    print("->", shown(write_result(*with_sitting(run, args.add_to, args.record))))
    return 0


def with_sitting(run: dict, earlier: Path | None, record: bool) -> tuple[dict, Path]:
    """Return the result document holding `run` as its last sitting, and where to write it."""
    if earlier is None:
        return {"benchmark": "page_speed", "sittings": [run]}, result_path("page-speed", record)
    doc = json.loads(earlier.read_text())
    sittings = doc.get("sittings") or [{k: v for k, v in doc.items() if k != "benchmark"}]
    return {"benchmark": "page_speed", "sittings": [*sittings, run]}, earlier


if __name__ == "__main__":
    sys.exit(main())
