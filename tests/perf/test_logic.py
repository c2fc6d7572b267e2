"""Pure parts of the performance-test runs: run ids and specs, rates, /proc parsing, the record's forms.

Regressions between runs and the compare page's parsing: tests/collector/query/test_bench_runs.py.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from collector.influx import encode_lines
from perf.record import ProgressSample, RunRecord, StepLatency, record_from_dict, record_points, record_to_dict
from perf.perftest import BenchSpec, progress_samples, run_id, window_rates
from perf.sysinfo import CpuMem, MachineInfo, ProcessSample, SessionSampler, cpu_percent, machine_info, session_usage


def test_run_ids_are_fresh_slugs_and_specs_are_checked():
    t = time.mktime((2026, 3, 4, 5, 6, 7, 0, 0, 0))
    assert run_id("my label/α 2", t).startswith("bench-my-label-2-2026") and run_id("", t).startswith("bench-run-")
    BenchSpec(rate=1000, duration=10).validate()
    for bad, msg in ((dict(rate=0), "--rate"), (dict(duration=0.5), "--duration"), (dict(label="a\nb"), "--label"),
                     (dict(warmup=-1), "--warmup"), (dict(messages=10), "--messages")):
        with pytest.raises(ValueError, match=msg):
            BenchSpec(**{"rate": 1000, "duration": 10, **bad}).validate()


def test_progress_rates_and_window():
    raw = [(0, 0, 0), (1_000_000_000, 100, 150), (2_000_000_000, 300, 350), (4_000_000_000, 700, 750)]
    assert [p.processed_eps for p in progress_samples(raw)] == [100.0, 200.0, 200.0]
    assert window_rates(raw, 1_000_000_000) == (600, 200.0, 200.0)
    assert window_rates(raw, 5_000_000_000) == (0, 0.0, 0.0)


def test_session_usage_and_sampling_of_this_session():
    usage = session_usage(os.getsid(0), 0)
    assert os.getpid() in usage.cpu_s and usage.rss_bytes > 0
    assert session_usage(-12345, 0).processes == 0
    assert machine_info().mem_total_bytes > 0
    assert cpu_percent(CpuMem(0, {1: 1.0}, 0), CpuMem(2_000_000_000, {1: 2.0}, 0)) == 50.0
    # 2 ended (its seconds leave the sum), 3 started: 1 used 0.5 s, 3 used 0.25 s
    before, after = CpuMem(0, {1: 1.0, 2: 9.0}, 0), CpuMem(1_000_000_000, {1: 1.5, 3: 0.25}, 0)
    assert cpu_percent(before, after) == 75.0 and after.processes == 2

    sampler = SessionSampler({"me": os.getsid(0)})
    t0 = time.time_ns()
    assert sampler.sample(t0) == []                                   # the first reading is the baseline
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    t1 = time.time_ns()
    (s,) = sampler.sample(t1)
    cpu_seconds = s.cpu_percent / 100 * (t1 - t0) / 1e9               # whatever the machine's load
    assert s.name == "me" and cpu_seconds >= 0.15 and s.rss_bytes > 10 * 2**20 and s.processes >= 1


def test_record_round_trips_through_json_and_encodes_as_points():
    rec = RunRecord(run="r1", label="x y", started_ns=10, window_start_ns=20, window_end_ns=30, git_commit="abc",
                    git_dirty=False, rate=1000, duration_s=1.0, warmup_s=0.0, command=["marketspread", "bench"],
                    commands={"job": ["marketspread", "job"]}, config={"bench": {"rate": 1000}},
                    machine=MachineInfo("h", 2, 2, "cpu", 1 << 30, "k", "3.11"), events=5, throughput_eps=5.0,
                    ingested_eps=5.0, results_received=1,
                    steps=[StepLatency("start-to-end", 5, 1, 2, 3, 4, 5, 6, 3.5)],
                    progress=[ProgressSample(25, 5, 5, 5.0, 5.0)],
                    processes=[ProcessSample("job", 25, 50.0, 1 << 20, 3)])
    assert record_from_dict(json.loads(json.dumps(record_to_dict(rec)))) == rec
    points = record_points(rec)
    assert [p.measurement for p in points] == ["bench_run", "bench_step", "bench_progress", "process"]
    head = points[0]
    assert head.tags == {"run": "r1", "label": "x y"} and head.fields["p99_ns"] == 4
    assert head.fields["job_cpu_mean_pct"] == 50.0 and json.loads(head.fields["commands"])["job"][1] == "job"
    assert encode_lines(points).count(b"\n") == 4
