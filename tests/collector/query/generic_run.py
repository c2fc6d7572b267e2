"""Synthetic points of the generic-query schema (docs/METRICS.md): several queries, sources, operators,
executors and declared steps, as the monitor writes them for any Spark streaming query."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx.lineproto import Point
from collector.points import latency_point
from collector.units import NS

APP = "local-1764000000000"
STEPS = ("parse", "enrich", "sink")          # declared order: not alphabetical, not first-seen
SOURCES = ("0:RateStreamV2", "1:FileStreamSource")
OPERATORS = ("0:stateStoreSave", "1:symmetricHashJoin")
EXECUTORS = ("driver", "1", "2")


@dataclass
class GenericRun:
    """What was written for one run: the figures the tests compare against."""
    run: str
    query_id: str
    start_ns: int
    seconds: int
    last_input_rate: float = 0.0
    input_rows: int = 0
    step_counts: dict = field(default_factory=dict)
    overran: int = 0
    judged: int = 0
    late_rows: dict = field(default_factory=dict)
    points: list = field(default_factory=list)
    batches: list = field(default_factory=list)          # (trigger start ns, batch ms, input rows) per batch

    def last_minute_rate(self) -> float:
        """Return rows/s of the batches that started in the 60 s before the newest one's end (or over the run)."""
        end = max(t + ms * 1_000_000 for t, ms, _ in self.batches)
        start = max(end - 60 * NS, min(t for t, _, _ in self.batches))
        return sum(n for t, _, n in self.batches if t >= start) / ((end - start) / NS)


def generic_run(run: str, start_ns: int, seconds: int = 30, trigger_ms: int = 1000, steps=STEPS,
                sources=SOURCES, operators=OPERATORS, app: str = APP, seed: int = 3,
                status: str = "running", latency: bool = True) -> GenericRun:
    """Return one query's points: a batch a second with its sources and operators, executors every 2 s, steps."""
    rng = np.random.default_rng(seed)
    g = GenericRun(run, f"id-{run}"[:60], start_ns, seconds)
    tags = {"run": run, "query": run}
    runs_fields = {"status": status, "query_id": g.query_id, "spark_run_id": f"sr-{seed}", "start_ns": start_ns,
                   "app_id": app, "app_name": "orders app", "trigger_ms": trigger_ms,
                   "steps": json.dumps(list(steps))}
    if status != "running":
        runs_fields.update(end_ns=start_ns + seconds * NS, batches=seconds)
    g.points.append(Point("runs", tags, runs_fields, start_ns))
    for i in range(seconds):
        t = start_ns + i * NS
        batch_ms = int(rng.integers(600, 1400))
        rate = float(round(rng.uniform(900, 1100), 3))
        rows = int(rng.integers(800, 1200))
        overran = int(batch_ms > trigger_ms)
        g.overran += overran
        g.judged += 1
        g.input_rows += rows
        g.last_input_rate = rate
        g.batches.append((t, batch_ms, rows))
        g.points.append(Point("spark_progress", tags, {
            "batch_id": i, "batch_ms": batch_ms, "addBatch_ms": batch_ms - 50, "input_rows": rows,
            "input_rows_per_s": rate, "processed_rows_per_s": rate * 1.5, "trigger_ms": trigger_ms,
            "overran": overran, "watermark_ns": t - 10 * NS, "watermark_delay_ms": 10_000 + i,
            "late_rows": i % 3, "rows_behind": 100 + i}, t))
        for j, src in enumerate(sources):
            fields = {"input_rows": rows // len(sources), "input_rows_per_s": rate / (j + 1),
                      "processed_rows_per_s": rate * 1.5 / (j + 1)}
            fields.update({"rows_behind": 100 + i} if j == 0 else {"files_behind": 3})
            g.points.append(Point("spark_source", {**tags, "source": src}, fields, t))
        for j, op in enumerate(operators):
            late = (i + j) % 3
            g.late_rows[op] = g.late_rows.get(op, 0) + late
            g.points.append(Point("spark_state", {**tags, "operator": op}, {
                "rows_total": 1000 * (j + 1) + i, "rows_updated": 10, "rows_removed": 1,
                "memory_bytes": 50_000 * (j + 1) + i, "late_rows": late}, t))
        if i % 2 == 0:
            for k, ex in enumerate(EXECUTORS):
                g.points.append(Point("spark_executor", {"app": app, "executor": ex}, {
                    "heap_used_bytes": 100_000_000 + k * 1_000_000 + i, "heap_max_bytes": 1_000_000_000,
                    "gc_time_ms": 10 * i, "gc_count": i, "cpu_time_ns": i * 500_000_000,
                    "running_tasks": k, "shuffle_read_bytes": 1000 * i, "shuffle_write_bytes": 2000 * i}, t))
        if latency:
            # written in reverse declared order, so first-seen order is not the declared one
            for s, step in enumerate(reversed(steps)):
                n = int(rng.integers(50, 100))
                values = rng.lognormal(np.log(1e6 * (s + 1)), 0.4, n).astype(np.int64) + 1
                g.step_counts[step] = g.step_counts.get(step, 0) + n
                g.points.append(latency_point(IntervalHistogram(run, run, step, "host-a/p0", t + s, NS,
                                                                LatencyHistogram.from_values(values))))
    return g
