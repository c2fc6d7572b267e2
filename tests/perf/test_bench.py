"""`marketspread bench` end to end: real ingress, Spark job, senders, receiver and InfluxDB."""
from __future__ import annotations

import os
import subprocess

from perf.perftest import ROOT

from ..cli_inprocess import run_main


def _count(client, measurement: str, field: str, run: str, **tags) -> int:
    where = " AND ".join(['"run" = $run', *(f'"{k}" = ${k}' for k in tags)])
    res = client.query(f'SELECT count("{field}") FROM "{measurement}" WHERE {where}', {"run": run, **tags})
    return int(res[0].values[0][1]) if res else 0


def test_bench_records_the_run_as_json_and_in_influxdb(bench_done, bench_db):
    rec = bench_done.record
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    # what ran: a fresh run id, the commit, every command line, the configuration, the machine
    assert rec.run.startswith("bench-base-") and rec.label == "base"
    assert rec.git_commit == head
    assert {"ingress", "job", "send-nbbo", "send-orders", "receive"} <= set(rec.commands)
    job_cmd = rec.commands["job"]
    assert "--forward" in job_cmd and job_cmd[job_cmd.index("--forward") + 1].startswith("127.0.0.1:")
    for stream in ("nbbo", "orders"):             # the offered rate, half per stream
        cmd = rec.commands[f"send-{stream}"]
        assert float(cmd[cmd.index("--rate") + 1]) == 10_000
    assert "bench" in rec.command and rec.command[rec.command.index("--rate") + 1] == "20000"
    assert rec.config["bench"]["rate"] == 20000 and rec.config["job"]["shards"] >= 1
    assert rec.machine.cores == os.cpu_count() and rec.machine.cpu_model and rec.machine.mem_total_bytes > 2**28

    # what it measured
    assert rec.window_end_ns - rec.window_start_ns >= 14e9
    assert rec.events > 0 and rec.throughput_eps > 0 and rec.results_received > 0
    steps = {s.step: s for s in rec.steps}
    assert {"ingress", "source", "check_market_data", "start-to-end"} <= set(steps)
    for s in steps.values():
        assert s.count > 0 and 0 < s.p50_ns <= s.p90_ns <= s.p95_ns <= s.p99_ns <= s.p999_ns <= s.max_ns
    for name in ("job", "ingress"):
        mine = [p for p in rec.processes if p.name == name]
        assert len(mine) >= 15 and all(p.rss_bytes > 0 for p in mine), name
        assert sum(p.cpu_percent for p in mine) > 0, name
    assert max(p.rss_bytes for p in rec.processes if p.name == "job") > 100 * 2**20    # the JVM is in the tree
    assert len(rec.progress) >= 15
    assert rec.run in bench_done.output and "start-to-end" in bench_done.output

    # the same in InfluxDB, beside the job's own latency histograms under the run id
    head_pts = bench_db.query('SELECT "throughput_eps", "commit", "cores" FROM "bench_run" WHERE "run" = $run '
                              'GROUP BY "label"', {"run": rec.run})
    assert head_pts[0].tags["label"] == "base"
    assert head_pts[0].values[0][1:] == [rec.throughput_eps, rec.git_commit, rec.machine.cores]
    assert _count(bench_db, "bench_step", "p99", rec.run) == len(rec.steps)
    assert _count(bench_db, "process", "cpu_pct", rec.run, process="job") == \
        len([p for p in rec.processes if p.name == "job"])
    assert _count(bench_db, "bench_progress", "processed_eps", rec.run) == len(rec.progress)
    assert _count(bench_db, "latency", "count", rec.run) > 0
    # the run's own state folder (log, checkpoint, results) is gone; its record stays
    assert not (bench_done.state_dir / "bench-runs" / rec.run).exists()


def test_bench_rejects_bad_flags_with_a_clear_error(bench_db):
    env = {**os.environ, **bench_db.config.as_env()}
    proc = run_main(["bench", "--duration", "0"], env)
    assert proc.returncode == 2
    assert "--duration must be between" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_main(["bench", "--rate", "-5"], env)
    assert proc.returncode == 2 and "--rate must be positive" in proc.stderr
