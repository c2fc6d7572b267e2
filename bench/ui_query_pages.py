"""How long the dashboard's pages take in a real browser, on real runs: a user's own jobs and the demo.

Runs the example jobs (`examples/`, plain PySpark that never imports the project) under
`marketspread watch` at once for `--duration` seconds into a real InfluxDB, as a user's
jobs would write it: Spark's progress, sources, state, executors through Spark's metrics
system, and, for `files_enrich`, its steps' latency histograms; then `marketspread demo`
for `--demo` seconds (Market Spread at 20,000 messages/s per stream) into the same
database. Then, for every page (runs, each run's job page, the demo's start-to-end step
page, alerts, compare), it starts the dashboard as a user does (`marketspread ui`, its own
process) and loads the page `--loads` times in a fresh headless Chromium, timed from the
navigation's start until the page is complete: no Dash callback pending, no "loading…"
placeholder left, every chart drawn by Plotly (bench/ui_browser.py's test), and that
`--colds` times. A first load, with an empty browser cache and a dashboard just started,
is a cold one: the cold figure is their median; the warm figure the median of the others.
Last, the same for bench/ui_floor.py's page, one 3-point chart, with the dashboard's loading
and with Dash's defaults: the floor no page of the dashboard goes under on this machine.

    python -m bench.ui_query_pages                                  # 90-s runs, 3 x 6 loads a page (~10 min)
    python -m bench.ui_query_pages --state-dir /tmp/uiq --loads 10  # keep the runs, re-use them next time

Figures are printed and written to bench/out/ (bench/results/ with `--record`); no figure
fails the benchmark.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench import ui_floor
from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from bench.ui_browser import _driver, _start_ui, load_page, provenance, start_server
from collector.influx.server import InfluxServer, free_port
from perf.sysinfo import machine_info

EXAMPLES = ("rate_windowed", "stream_join", "files_enrich", "foreachbatch_sqlite")


def record_runs(server: InfluxServer, work: Path, duration: float) -> None:
    """Run every example under `marketspread watch` at once; wait for them all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(server.config().as_env(), MS_STATE_DIR=str(work / "state"), PYSPARK_PYTHON=sys.executable)
    procs = {}
    for name in EXAMPLES:
        cmd = [sys.executable, "-m", "marketspread", "watch", "--", str(ROOT / "examples" / f"{name}.py"),
               "--duration", str(duration), "--work-dir", str(work / name)]
        procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=(work / f"{name}.log").open("wb"),
                                       stderr=subprocess.STDOUT)
    for name, proc in procs.items():
        if proc.wait(timeout=duration + 600) != 0:
            raise RuntimeError(f"{name} failed: see {work / f'{name}.log'}")
    (work / "recorded").write_text(f"{duration}\n")


def record_demo(server: InfluxServer, work: Path, duration: float) -> str:
    """Run `marketspread demo` for `duration` s into the same database; return its run's name."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(server.config().as_env(), PYSPARK_PYTHON=sys.executable)
    ports = [str(free_port()) for _ in range(3)]
    cmd = [sys.executable, "-m", "marketspread", "demo", "--duration", str(duration), "--rate", "20000",
           "--state-dir", str(work / "demo"), "--ui-port", ports[0], "--nbbo-port", ports[1], "--orders-port", ports[2]]
    with (work / "demo.log").open("wb") as log:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=duration + 900,
                              start_new_session=True)
        if done.returncode:
            raise RuntimeError(f"the demo failed: see {work / 'demo.log'}")
    server.start()                   # ours, or again if it went down with the demo's processes
    runs = server.client().query('SHOW TAG VALUES FROM "runs" WITH KEY = "run"')
    names = sorted(v for series in runs for _, v in series.values if v not in EXAMPLES)
    if not names:
        raise RuntimeError(f"the demo wrote no run: see {work / 'demo.log'}")
    (work / "recorded-demo").write_text(names[-1] + "\n")
    return names[-1]


def start_floor(form: str, port: int, log_path: Path) -> subprocess.Popen:
    """Start bench/ui_floor.py's page in `form` on `port`, as its own process; return it once it answers."""
    return start_server([sys.executable, "-m", "bench.ui_floor", "--port", str(port), "--form", form],
                        {**os.environ, "PYTHONPATH": str(ROOT)}, f"http://127.0.0.1:{port}{ui_floor.FLOOR_PATH}",
                        log_path, "the floor page")


def time_page(server: InfluxServer, url_path: str, loads: int, log: Path, colds: int = 1,
              start: Callable[[int], subprocess.Popen] | None = None) -> dict:
    """Load one page `loads` times in each of `colds` fresh dashboards and browsers; return cold and warm figures.

    The cold figure is the median of the `colds` first loads (one each: a single sample says little on
    a shared machine), the warm one the median of all later loads. `start(port)` starts what serves the
    page (default: the dashboard, `marketspread ui`).
    """
    cold, warm = [], []
    for _ in range(colds):
        port = free_port()
        ui = start(port) if start else _start_ui(server.config(), port, log)
        driver = _driver()
        try:
            seconds = [load_page(driver, f"http://127.0.0.1:{port}{url_path}")["seconds"] for _ in range(loads)]
        finally:
            driver.quit()
            ui.kill()
            ui.wait()
        cold.append(seconds[0])
        warm += seconds[1:]
    return {"cold_s": round(statistics.median(cold), 3), "cold_runs_s": [round(s, 3) for s in cold],
            "warm_median_s": round(statistics.median(warm), 3) if warm else None,
            "warm_max_s": round(max(warm), 3) if warm else None, "warm_loads_s": [round(s, 3) for s in warm]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=90.0, help="seconds each example runs monitored")
    ap.add_argument("--demo", type=float, default=60.0, help="seconds of the Market Spread demo run (0: none)")
    ap.add_argument("--loads", type=int, default=6, help="loads per page and dashboard (the first is the cold one)")
    ap.add_argument("--colds", type=int, default=3, help="fresh dashboards and browsers per page: cold loads")
    ap.add_argument("--state-dir", type=Path, default=None, help="keep InfluxDB and the runs here, re-use them")
    add_record_flag(ap)
    args = ap.parse_args(argv)
    load_start = list(os.getloadavg())
    work = args.state_dir or Path(tempfile.mkdtemp(prefix="ui-query-pages-"))
    work.mkdir(parents=True, exist_ok=True)
    server = InfluxServer(work / "influx", port=free_port())
    server.start()
    try:
        if not (work / "recorded").exists():
            print(f"recording {len(EXAMPLES)} monitored example runs of {args.duration:.0f} s ...", flush=True)
            record_runs(server, work, args.duration)
        demo = None
        if args.demo > 0:
            marker = work / "recorded-demo"
            if marker.exists():
                demo = marker.read_text().strip()
            else:
                print(f"recording a Market Spread demo run of {args.demo:.0f} s ...", flush=True)
                demo = record_demo(server, work, args.demo)
        pages = {"runs": "/", **{f"job {name}": f"/run/{name}" for name in EXAMPLES}}
        if demo:
            pages.update({"job, demo (Market Spread)": f"/run/{demo}",
                          "step, demo start-to-end": f"/step/{demo}/start-to-end"})
        pages.update({"alerts": "/alerts", "compare": "/compare"})
        floors = {f"floor ({form}): Dash, one 3-point chart": form for form in reversed(ui_floor.FORMS)}
        figures = {}
        for page, path in [*pages.items(), *((name, ui_floor.FLOOR_PATH) for name in floors)]:
            start = (lambda port, form=floors[page]: start_floor(form, port, work / "ui.log")) if page in floors else None
            figures[page] = time_page(server, path, args.loads, work / "ui.log", args.colds, start)
            f = figures[page]
            print(f"{page:28s} cold {f['cold_s']:.2f} s (median of {args.colds}: "
                  f"{', '.join(f'{s:.2f}' for s in f['cold_runs_s'])}), warm median {f['warm_median_s']:.2f} s "
                  f"(max {f['warm_max_s']:.2f} s)", flush=True)
    finally:
        server.stop()
    doc = {"benchmark": "ui_query_pages", **provenance("bench.ui_query_pages", argv),
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "examples": list(EXAMPLES),
           "duration_s": args.duration,
           "demo_run": demo, "demo_s": args.demo,
           "loads": args.loads, "colds": args.colds,
           "machine": {"cpus": os.cpu_count(), "cpu_model": machine_info().cpu_model,
                       "python": platform.python_version(), "load_avg_start": load_start,
                       "load_avg_end": list(os.getloadavg())},
           "pages": figures}
    print("->", shown(write_result(doc, result_path("ui-query-pages", args.record))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
