"""How long the dashboard's pages of a user's own jobs take in a real browser, on real monitored runs.

Runs the example jobs (`examples/`, plain PySpark that never imports the project) under
`marketspread watch` at once for `--duration` seconds into a real InfluxDB, as a user's
jobs would write it: Spark's progress, sources, state, executors through Spark's metrics
system, and, for `files_enrich`, its steps' latency histograms. Then, for the runs page and
each example's job page, it starts the dashboard as a user does (`marketspread ui`, its own
process) and loads the page `--loads` times in headless Chromium, timed from the
navigation's start until the page is complete: no Dash callback pending, no "loading…"
placeholder left, every chart drawn by Plotly (bench/ui_browser.py's test). The first load
after the dashboard starts is the cold one; the median of the others is the warm figure.

    python -m bench.ui_query_pages                                  # 90-s runs, 6 loads a page (~5 min)
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
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from bench.ui_browser import _driver, _start_ui, load_page
from collector.influx.server import InfluxServer, free_port

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


def time_page(server: InfluxServer, url_path: str, loads: int, log: Path) -> dict:
    """Start the dashboard, load one page `loads` times; return the cold load and the warm ones' median."""
    port = free_port()
    ui = _start_ui(server.config(), port, log)
    driver = _driver()
    try:
        seconds = [load_page(driver, f"http://127.0.0.1:{port}{url_path}")["seconds"] for _ in range(loads)]
    finally:
        driver.quit()
        ui.kill()
        ui.wait()
    warm = seconds[1:]
    return {"cold_s": round(seconds[0], 3), "warm_median_s": round(statistics.median(warm), 3) if warm else None,
            "warm_max_s": round(max(warm), 3) if warm else None, "loads": [round(s, 3) for s in seconds]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=90.0, help="seconds each example runs monitored")
    ap.add_argument("--loads", type=int, default=6, help="loads per page (the first is the cold one)")
    ap.add_argument("--state-dir", type=Path, default=None, help="keep InfluxDB and the runs here, re-use them")
    add_record_flag(ap)
    args = ap.parse_args(argv)
    work = args.state_dir or Path(tempfile.mkdtemp(prefix="ui-query-pages-"))
    work.mkdir(parents=True, exist_ok=True)
    server = InfluxServer(work / "influx", port=free_port())
    server.start()
    try:
        if not (work / "recorded").exists():
            print(f"recording {len(EXAMPLES)} monitored example runs of {args.duration:.0f} s ...", flush=True)
            record_runs(server, work, args.duration)
        pages = {"runs": "/", **{f"job {name}": f"/run/{name}" for name in EXAMPLES}}
        figures = {}
        for page, path in pages.items():
            figures[page] = time_page(server, path, args.loads, work / "ui.log")
            f = figures[page]
            print(f"{page:26s} cold {f['cold_s']:.2f} s, warm median {f['warm_median_s']:.2f} s "
                  f"(max {f['warm_max_s']:.2f} s)", flush=True)
    finally:
        server.stop()
    doc = {"benchmark": "ui_query_pages", "examples": list(EXAMPLES), "duration_s": args.duration,
           "loads": args.loads, "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                            "load_avg_end": list(os.getloadavg())},
           "pages": figures}
    print("->", shown(write_result(doc, result_path("ui-query-pages", args.record))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
