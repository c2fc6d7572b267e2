"""What `marketspread bench` records about a run, as JSON and as InfluxDB points (pure, no I/O).

Schema of the points: docs/METRICS.md ("Performance-test runs"). The JSON file holds the
same record with every series in full, so a run can be compared or re-read without
InfluxDB; `write_record` (the only I/O here) writes both.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from collector.influx import Point
from collector.query.bench_runs import BenchStep
from collector.vocabulary import (BENCH_PROGRESS, BENCH_RUN, BENCH_STEP, PROCESS, STEP_E2E, TAG_LABEL, TAG_PROCESS,
                                  TAG_RUN, TAG_STEP)

from perf.sysinfo import MachineInfo, ProcessSample

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class StepLatency(BenchStep):
    """Latency of one step over the measurement window, from the job's merged histograms:
    what the compare page reads back (`BenchStep`), and the mean."""
    mean_ns: float


@dataclass(frozen=True)
class ProgressSample:
    """One second of the run: events processed (committed by the job) and ingested."""
    time_ns: int
    processed: int                 # cumulative, the job's committed offset
    ingested: int                  # cumulative, the ingress log's head
    processed_eps: float           # since the previous sample
    ingested_eps: float


@dataclass(frozen=True)
class RunRecord:
    """One performance-test run: what ran, where, and what it measured.

    Latencies are in ns. `throughput_eps` is the processed events/s over the
    measurement window [window_start_ns, window_end_ns), which starts `warmup_s`
    after the job's first commit.
    """
    run: str                       # the run id the job and ingress tagged their metrics with
    label: str
    started_ns: int
    window_start_ns: int
    window_end_ns: int
    git_commit: str | None
    git_dirty: bool
    rate: int                      # offered events/s over both streams
    duration_s: float
    warmup_s: float
    command: list[str]             # the bench command itself
    commands: dict[str, list[str]] # each process it started
    config: dict[str, Any]
    machine: MachineInfo
    events: int                    # processed in the window
    throughput_eps: float
    ingested_eps: float
    results_received: int          # result records the receiver got over the whole run
    steps: list[StepLatency]
    progress: list[ProgressSample] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)

    def step(self, name: str) -> StepLatency | None:
        """Return one step's latency, None if the run has no data for it."""
        return next((s for s in self.steps if s.step == name), None)


def record_to_dict(rec: RunRecord) -> dict:
    """Return the record as plain JSON-able data (with a schema version)."""
    return {"schema": SCHEMA_VERSION, **asdict(rec)}


def record_from_dict(d: dict) -> RunRecord:
    """Rebuild a record from `record_to_dict`'s output (e.g. a JSON file)."""
    d = {k: v for k, v in d.items() if k != "schema"}
    return RunRecord(**{**d, "machine": MachineInfo(**d["machine"]),
                        "steps": [StepLatency(**s) for s in d["steps"]],
                        "progress": [ProgressSample(**p) for p in d.get("progress", [])],
                        "processes": [ProcessSample(**p) for p in d.get("processes", [])]})


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def record_points(rec: RunRecord) -> list[Point]:
    """Return the record's InfluxDB points (run summary, steps, progress, processes)."""
    tags = {TAG_RUN: rec.run, TAG_LABEL: rec.label}
    fields: dict[str, Any] = {
        "commit": rec.git_commit or "", "dirty": rec.git_dirty, "rate": int(rec.rate),
        "duration_s": float(rec.duration_s), "warmup_s": float(rec.warmup_s),
        "window_start_ns": int(rec.window_start_ns), "window_end_ns": int(rec.window_end_ns),
        "events": int(rec.events), "throughput_eps": float(rec.throughput_eps),
        "ingested_eps": float(rec.ingested_eps), "results": int(rec.results_received),
        "cores": int(rec.machine.cores), "cpu_model": rec.machine.cpu_model,
        "mem_total_bytes": int(rec.machine.mem_total_bytes), "hostname": rec.machine.hostname,
        "command": json.dumps(rec.command), "commands": json.dumps(rec.commands),
        "config": json.dumps(rec.config, sort_keys=True, default=str)}
    e2e = rec.step(STEP_E2E)
    if e2e is not None:
        fields.update(p50_ns=e2e.p50_ns, p99_ns=e2e.p99_ns)
    for name in sorted({p.name for p in rec.processes}):
        mine = [p for p in rec.processes if p.name == name]
        fields[f"{name}_cpu_mean_pct"] = round(_mean([p.cpu_percent for p in mine]), 2)
        fields[f"{name}_rss_max_bytes"] = max(p.rss_bytes for p in mine)
    points = [Point(BENCH_RUN, tags, fields, rec.started_ns)]
    for s in rec.steps:
        points.append(Point(BENCH_STEP, {**tags, TAG_STEP: s.step}, {
            "count": s.count, "p50": s.p50_ns, "p90": s.p90_ns, "p95": s.p95_ns, "p99": s.p99_ns,
            "p999": s.p999_ns, "max": s.max_ns, "mean": float(s.mean_ns)}, rec.started_ns))
    for p in rec.progress:
        points.append(Point(BENCH_PROGRESS, tags, {
            "processed": p.processed, "ingested": p.ingested, "processed_eps": float(p.processed_eps),
            "ingested_eps": float(p.ingested_eps)}, p.time_ns))
    for p in rec.processes:
        points.append(Point(PROCESS, {**tags, TAG_PROCESS: p.name}, {
            "cpu_pct": float(p.cpu_percent), "rss_bytes": int(p.rss_bytes), "processes": int(p.processes)},
            p.time_ns))
    return points


def write_json(rec: RunRecord, path: Path) -> Path:
    """Write the record to `path` atomically; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record_to_dict(rec), indent=1) + "\n")
    os.replace(tmp, path)
    return path


def write_record(rec: RunRecord, path: Path, client) -> int:
    """Write the JSON file and the points (through `client.write`); return the points written."""
    write_json(rec, path)
    return client.write(record_points(rec))
