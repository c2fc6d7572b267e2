"""Pure parts of bench/scaling.py: strace's summary, Spark's event log, CPU over a window."""
from __future__ import annotations

import json

from perf.scaling_figures import PROGRESS_EVENT, cpu_used, parse_strace_summary, per_million, phase_stats, progress_durations

STRACE_C = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 97.50    0.143669        2873        50           fsync
  2.50    0.003000        1000         3         1 fdatasync
------ ----------- ----------- --------- --------- ----------------
100.00    0.146669        2758        53         1 total
"""


def test_strace_summary_rows_without_the_total():
    assert parse_strace_summary(STRACE_C) == {"fsync": (50, 0.143669), "fdatasync": (3, 0.003)}
    assert parse_strace_summary("") == {}


def _progress(batch: int, **ms) -> str:
    return json.dumps({"Event": PROGRESS_EVENT, "progress": {"batchId": batch, "durationMs": ms}})


def test_progress_durations_from_an_event_log():
    lines = [_progress(1, addBatch=90, triggerExecution=120), '{"Event":"SparkListenerJobStart"}',
             _progress(0, addBatch=900, triggerExecution=1200, queryPlanning=400), "not json " + PROGRESS_EVENT,
             _progress(2, addBatch=110, triggerExecution=130, queryPlanning=10)]
    got = progress_durations(lines)
    assert [b for b, _ in got] == [0, 1, 2]
    med, mean = phase_stats([d for b, d in got if b > 0])
    assert med == {"addBatch": 100.0, "triggerExecution": 125.0, "queryPlanning": 10.0}
    assert mean["triggerExecution"] == 125.0 and "walCommit" not in mean


def test_cpu_used_counts_new_processes_whole_and_never_goes_negative():
    assert cpu_used({1: 2.0, 2: 5.0}, {1: 3.5, 3: 0.25}) == 1.75
    assert cpu_used({1: 2.0}, {1: 1.0}) == 0.0
    assert per_million(2.0, 4_000_000) == 0.5
