"""The scaling benchmark's pure parts (`bench/scaling.py`): strace's summary, Spark's event log, CPU sums."""
from __future__ import annotations

import json
import re
import statistics

PHASES = ("queryPlanning", "getBatch", "latestOffset", "walCommit", "commitOffsets", "addBatch",
          "triggerExecution")
PROGRESS_EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"
_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+([\d.]+)\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def parse_strace_summary(text: str) -> dict[str, tuple[int, float]]:
    """Return {syscall: (calls, seconds)} from `strace -c` output (the `total` row left out)."""
    out = {}
    for line in text.splitlines():
        m = _STRACE_ROW.match(line)
        if m and m.group(3) != "total":
            out[m.group(3)] = (int(m.group(2)), float(m.group(1)))
    return out


def progress_durations(lines) -> list[tuple[int, dict[str, int]]]:
    """Return (batchId, durationMs) of every query progress in a Spark event log's lines, by batch id."""
    found = {}
    for line in lines:
        if PROGRESS_EVENT not in line:
            continue
        try:
            p = json.loads(line)["progress"]
            found[int(p["batchId"])] = {str(k): int(v) for k, v in (p.get("durationMs") or {}).items()}
        except (ValueError, KeyError, TypeError):
            continue
    return sorted(found.items())


def phase_stats(durations: list[dict[str, int]]) -> tuple[dict[str, float], dict[str, float]]:
    """Return (median, mean) ms of each phase present, over the given batches' durationMs."""
    med, mean = {}, {}
    for ph in PHASES:
        vals = [d[ph] for d in durations if ph in d]
        if vals:
            med[ph] = float(statistics.median(vals))
            mean[ph] = round(statistics.fmean(vals), 2)
    return med, mean


def cpu_used(baseline: dict[int, float], last: dict[int, float]) -> float:
    """CPU seconds used since `baseline` by the processes of `last` (one new since then: all its CPU)."""
    return sum(max(0.0, cpu - baseline.get(pid, 0.0)) for pid, cpu in last.items())


def per_million(value: float, events: int) -> float:
    """Return `value` per million events."""
    return value * 1e6 / events if events else float("nan")
