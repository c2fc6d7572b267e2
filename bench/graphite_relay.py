"""What Spark's metrics sink sends and what relaying it into `spark_executor` points costs.

    python -m bench.graphite_relay [--reports 1000] [--spark-seconds 8]

1. Parsing: CPU (`time.process_time`) to parse and assemble `--reports` driver reports
   (the real lines of tests/collector/data/spark_graphite_lines.txt, a new timestamp each),
   once as the sink's filter (`SINK_REGEX`) sends them and once unfiltered.
2. Relay: the same filtered reports sent over TCP, one connection each, to a `GraphiteRelay`;
   the relay thread's own CPU (its thread clock) per report.
3. Spark: a real local[2] session per setting (unless `--spark-seconds 0`), with and without
   the filter, its lines per report (lines / connections) as the relay counted them.

Figures are printed and written to bench/out/graphite-relay-<UTC>.json
(`--record`: bench/results/); never fails on a figure.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from collector.graphite import SINK_REGEX, ExecutorReportAssembler, parse_line
from collector.graphite_relay import GraphiteRelay

FIXTURE = ROOT / "tests" / "collector" / "data" / "spark_graphite_lines.txt"
APP = "local-1795869546325"
JOB = """
import json, sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("graphite-bench").config("spark.ui.enabled", "false")
         .config(map=json.loads(sys.argv[1])).getOrCreate())
end = time.time() + float(sys.argv[2])
while time.time() < end:
    spark.range(0, 500_000).selectExpr("id % 50 AS k").groupBy("k").count().collect()
spark.stop()
"""


class CountingWriter:
    """A writer that only counts points (the relay's own cost, not a database's)."""

    def __init__(self):
        self.points = 0

    def add(self, points):
        self.points += len(points)


def driver_report(filtered: bool) -> list[str]:
    """Return the fixture's driver report lines without timestamps: `<path> <value>`."""
    rx = re.compile(SINK_REGEX)
    out = []
    for raw in FIXTURE.read_text().splitlines():
        path, value, _ = raw.split()
        name = path.removeprefix("sparkmon.")
        if f".{APP}.driver." not in raw and not raw.startswith(f"sparkmon.{APP}.driver."):
            continue
        if filtered and not (rx.search(name) or rx.search(name.removesuffix(".count"))):
            continue
        out.append(f"{path} {value}")
    return out


def parse_cost(report: list[str], n: int) -> dict:
    """Parse and assemble `n` reports; return CPU seconds per report and points made."""
    t0 = 1_800_000_000
    reports = [[f"{line} {t0 + i}".encode() for line in report] for i in range(n)]
    asm, points = ExecutorReportAssembler(), 0
    cpu = time.process_time()
    for i, lines in enumerate(reports):
        for raw in lines:
            points += len(asm.add(parse_line(raw), float(i)))
        points += len(asm.end_of_report())
    cpu = time.process_time() - cpu
    return {"lines_per_report": len(report), "reports": n, "points": points, "cpu_us_per_report": cpu / n * 1e6}


def relay_cost(report: list[str], n: int) -> dict:
    """Send `n` reports over TCP, one connection each; return the relay thread's CPU per report."""
    writer = CountingWriter()
    # the fixture's prefix, one timestamp a second from now: lift the relay's guards that would stop a replay
    relay = GraphiteRelay(writer, prefix="sparkmon", max_skew_s=n + 60, series_burst=n, max_lines_per_s=10**9).start()
    clock = time.pthread_getcpuclockid(relay._thread.ident)   # the relay thread's CPU alone
    t0, cpu0 = int(time.time()), time.clock_gettime(clock)
    for i in range(n):
        payload = "".join(f"{line} {t0 + i}\n" for line in report).encode()
        with socket.create_connection(("127.0.0.1", relay.port)) as s:
            s.sendall(payload)
    deadline = time.monotonic() + 30
    while writer.points < n and time.monotonic() < deadline:
        time.sleep(0.01)
    cpu = time.clock_gettime(clock) - cpu0
    stats = relay.stats()
    relay.stop()
    return {"reports": n, "points": writer.points, "lines": stats.lines, "cpu_us_per_report": cpu / n * 1e6}


def spark_lines(seconds: float, filtered: bool) -> dict:
    """Run a real Spark session `seconds` long; return its reports and lines per report as relayed."""
    relay = GraphiteRelay(CountingWriter()).start()
    conf = relay.spark_conf(period_s=1)
    if not filtered:
        conf.pop("spark.metrics.conf.*.sink.graphite.regex")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-c", JOB, json.dumps(conf), str(seconds)], env=env,
                          capture_output=True, text=True, timeout=300)
    time.sleep(1.5)
    stats = relay.stats()
    relay.stop()
    return {"returncode": proc.returncode, "reports": stats.connections, "points": stats.points,
            "lines": stats.lines, "unknown_lines": stats.unknown_lines, "bad_lines": stats.bad_lines,
            "lines_per_report": stats.lines / max(1, stats.connections)}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.graphite_relay", description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=1000)
    ap.add_argument("--spark-seconds", type=float, default=8.0)
    add_record_flag(ap)
    args = ap.parse_args()
    out = {"loadavg_at_start": os.getloadavg(),
           "parse_filtered": parse_cost(driver_report(True), args.reports),
           "parse_unfiltered_fixture": parse_cost(driver_report(False), args.reports),
           "relay_tcp_filtered": relay_cost(driver_report(True), args.reports)}
    if args.spark_seconds > 0:
        out["spark_filtered"] = spark_lines(args.spark_seconds, True)
        out["spark_unfiltered"] = spark_lines(args.spark_seconds, False)
    for name, figures in out.items():
        print(f"{name:26} {figures}")
    path = write_result(out, result_path("graphite-relay", args.record))
    print(f"written to {shown(path)}")
    broken = any(v.get("returncode", 0) != 0 for v in out.values() if isinstance(v, dict))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
