"""A finished run of any streaming query, written as the monitor writes one, for the dashboard benchmarks.

One query (`bench-ui-query`) with a batch a second on a 1-s trigger: its `runs` point
(application id, trigger, three declared steps), `spark_progress` with Spark's rates, the
trigger and overrun, watermark and late rows; two sources (`spark_source`: a rate source with
rows behind, a file source with files behind), two stateful operators (`spark_state`), a
driver and two executors every 2 s (`spark_executor`), and 1-s `latency` points of its
three steps on two partitions with the rollups the monitor's aggregator writes beside them
(histograms drawn from a pool of 60 per step, so a day writes in minutes). Schema: docs/METRICS.md.

    .venv/bin/python -m bench.ui_browser --query-hours 1     # written beside the Market Spread run
"""
from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import numpy as np

from collector.aggregate import ROLLUP_INTERVALS_S, IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient, Point, ensure_database
from collector.points import latency_point
from collector.units import NS

QUERY_RUN = "bench-ui-query"
APP = "local-1764000000000"
STEPS = ("parse", "enrich", "write")
_CHUNK = 20_000
_POOL = 60                 # distinct 1-s histograms per step; divides every rollup length
_WORKERS = ("host/p0", "host/p1")


def _points(start: int, seconds: int, seed: int):
    """Yield the run's points in time order."""
    rng = np.random.default_rng(seed)
    tags = {"run": QUERY_RUN, "query": QUERY_RUN}
    yield Point("runs", tags, {"status": "finished", "query_id": "6f1c2a9e-0b7d-4c1e-9a55-3f0e8d2b7c41",
                               "spark_run_id": "r", "start_ns": start, "end_ns": start + seconds * NS,
                               "batches": seconds, "app_id": APP, "app_name": "bench", "trigger_ms": 1000,
                               "steps": json.dumps(STEPS)}, start)
    for i in range(seconds):
        t = start + i * NS
        batch_ms = int(rng.integers(500, 1300))
        rate = float(rng.uniform(900, 1100))
        yield Point("spark_progress", tags, {
            "batch_id": i, "batch_ms": batch_ms, "addBatch_ms": batch_ms - 40, "input_rows": int(rate),
            "input_rows_per_s": rate, "processed_rows_per_s": rate * 1.4, "trigger_ms": 1000,
            "overran": int(batch_ms > 1000), "watermark_ns": t - 10 * NS, "watermark_delay_ms": 10_000,
            "late_rows": i % 3, "rows_behind": 50 + i % 100}, t)
        yield Point("spark_source", {**tags, "source": "0:RateStreamV2"}, {
            "input_rows": int(rate), "input_rows_per_s": rate, "processed_rows_per_s": rate * 1.4,
            "rows_behind": 50 + i % 100}, t)
        yield Point("spark_source", {**tags, "source": "1:FileStreamSource"}, {
            "input_rows": 10, "input_rows_per_s": 10.0, "processed_rows_per_s": 14.0, "files_behind": i % 5}, t)
        for j, op in enumerate(("0:stateStoreSave", "1:symmetricHashJoin")):
            yield Point("spark_state", {**tags, "operator": op}, {
                "rows_total": 10_000 * (j + 1) + i % 500, "rows_updated": 100, "rows_removed": 90,
                "memory_bytes": 5_000_000 * (j + 1), "late_rows": (i + j) % 3}, t)
        if i % 2 == 0:
            for k, ex in enumerate(("driver", "1", "2")):
                yield Point("spark_executor", {"app": APP, "executor": ex}, {
                    "heap_used_bytes": 200_000_000 + int(rng.integers(0, 50_000_000)), "heap_max_bytes": 1 << 30,
                    "gc_time_ms": i * 3, "gc_count": i // 4, "cpu_time_ns": i * 400_000_000, "running_tasks": k,
                    "shuffle_read_bytes": i * 1000, "shuffle_write_bytes": i * 2000}, t)



def _latency(start: int, seconds: int, seed: int):
    """Yield each step's 1-s latency points per worker, then the rollups the aggregator would write."""
    rng = np.random.default_rng(seed + 1)
    end = start + seconds * NS
    for k, step in enumerate(STEPS):
        pool = [LatencyHistogram.from_values(rng.lognormal(np.log(1e6 * (k + 1)), 0.5, 500).astype(np.int64) + 1)
                for _ in range(_POOL)]
        for worker in _WORKERS:
            tags = {"run": QUERY_RUN, "pipeline": QUERY_RUN, "step": step, "worker": worker}
            fields = [latency_point(IntervalHistogram(QUERY_RUN, QUERY_RUN, step, worker, 0, NS, h)).fields
                      for h in pool]
            for i in range(seconds):
                yield Point("latency", tags, fields[i % _POOL], start + i * NS)
            for size_s in ROLLUP_INTERVALS_S:
                size, made = size_s * NS, {}
                for b in range(-(-start // size) * size, end - size + 1, size):
                    first = (b - start) // NS
                    key = first % _POOL if size_s < _POOL else 0      # longer ones hold whole pool cycles
                    if key not in made:
                        hist = LatencyHistogram()
                        for i in range(first, first + size_s):
                            hist.add(pool[i % _POOL])
                        made[key] = latency_point(IntervalHistogram(QUERY_RUN, QUERY_RUN, step, worker, 0, size,
                                                                    hist, rollup=True))
                    yield made[key]._replace(time_ns=b)


def ensure_query_run(client: InfluxClient, done: Path, hours: float, seed: int = 1) -> dict:
    """Write the query's run once (`done` remembers it, so a kept folder re-times only); return what was written."""
    if done.exists():
        return json.loads(done.read_text())
    ensure_database(client)
    seconds = int(hours * 3600)
    start = (time.time_ns() // NS - seconds - 15) * NS
    print(f"writing a streaming query's run of {seconds:,} s to {client.url} ...", flush=True)
    batch, count = [], 0
    for p in itertools.chain(_points(start, seconds, seed), _latency(start, seconds, seed)):
        batch.append(p)
        if len(batch) >= _CHUNK:
            client.write(batch)
            count, batch = count + len(batch), []
    client.write(batch)
    written = {"run": QUERY_RUN, "seconds": seconds, "points": count + len(batch)}
    done.write_text(json.dumps(written))
    return written
