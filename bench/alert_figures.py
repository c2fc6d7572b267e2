"""What one evaluation of a rule on a Spark query's figures costs against a real InfluxDB.

    python -m bench.alert_figures [--batches 36000] [--repeat 10]

Starts a project InfluxDB (free loopback port, a temporary state folder), writes
`--batches` `spark_progress` points of one query, one per 100 ms (36,000: an hour), and
times `MetricReader.value` for a figure-to-figure rule (two counts in one request) and
for aggregates over the whole window. Medians, minima and maxima are printed with each
rule's value and written to bench/out/alert-figures-<UTC>.json (`--record`:
bench/results/); never fails on a figure.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.output import add_record_flag, result_path, shown, write_result
from alerts.query import MetricReader
from alerts.rules import Rule
from collector.influx import Point, ensure_database
from collector.influx.server import InfluxServer

CONDITIONS = ("batch_duration > trigger", "input_rate > processing_rate", "p99(batch_duration) > 1s",
              "rows_behind > 1M")


def measure(batches: int, repeat: int) -> dict[str, dict]:
    """Write the points, then time each rule's evaluation `repeat` times; return seconds and values."""
    state = Path(tempfile.mkdtemp(prefix="alert-figures-"))
    server = InfluxServer(state, port=0)
    try:
        server.start()
        client = server.client(db="alert_figures")
        ensure_database(client)
        now = time.time_ns()
        points = [Point("spark_progress", {"run": "q", "query": "q"},
                        {"batch_ms": 80 + i % 50, "trigger_ms": 100, "input_rows_per_s": 1000.0 + i % 7,
                         "processed_rows_per_s": 1003.0, "rows_behind": i}, now - (batches - i) * 100_000_000)
                  for i in range(batches)]
        for k in range(0, batches, 5000):
            client.write(points[k:k + 5000])
        window = max(1, batches // 10)
        reader, out = MetricReader(client), {}
        for text in CONDITIONS:
            rule = Rule.from_dict({"name": "x", "condition": text, "job": "q", "window": f"{window}s"})
            value = reader.value(rule, now)                   # the first read warms InfluxDB's caches
            seconds = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                reader.value(rule, now)
                seconds.append(time.perf_counter() - t0)
            out[text] = {"value": value, "seconds": seconds}
        return out
    finally:
        server.stop()
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Measure, print, write the JSON."""
    ap = argparse.ArgumentParser(prog="python -m bench.alert_figures", description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=36_000)
    ap.add_argument("--repeat", type=int, default=10)
    add_record_flag(ap)
    args = ap.parse_args(argv)
    runs = measure(max(1, args.batches), max(1, args.repeat))
    summary = {}
    for text, r in runs.items():
        s = r["seconds"]
        summary[text] = {"value": r["value"], "median_ms": statistics.median(s) * 1e3,
                         "min_ms": min(s) * 1e3, "max_ms": max(s) * 1e3}
        print(f"{text:>30}: value {r['value']:.4g}, median {summary[text]['median_ms']:.1f} ms "
              f"(min {summary[text]['min_ms']:.1f}, max {summary[text]['max_ms']:.1f}) per evaluation "
              f"over {args.batches} batches")
    path = write_result({"args": vars(args), "loadavg_at_start": os.getloadavg(), "summary": summary,
                         "runs": runs}, result_path("alert-figures", args.record))
    print(f"written to {shown(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
