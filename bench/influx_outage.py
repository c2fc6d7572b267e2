"""What an InfluxDB outage costs the job: throughput before, during and after 30 s down, in one run.

    python -m bench.influx_outage [--outage 30] [--before 30] [--after 30] [--warmup 20] [--rate N]

perf/e2e.py's whole path (`marketspread ingress`, `marketspread job` with metrics on, two
looping senders, unthrottled by default) writes to a real InfluxDB
(`collector.influx.server.InfluxServer`, free loopback port). After the warm-up the job's
committed events/s are sampled every second for `--before` s, then the server is stopped
for `--outage` s, then started again for `--after` s. Figures: the mean rate of each
phase, during/before and after/before, and the noise (the spread of the 5-s windows of
the before phase), so a ratio can be read against it. Afterwards: perf/exactness.py's
check, and the metrics check: every latency interval the committed batches recorded
must be in InfluxDB with its count (the outage's intervals backfilled), none missing.
Printed and written to bench/out/influx-outage-<UTC>.json (`--record`: bench/results/); exit 1 only if the run
broke or a check failed, never on a figure.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from collector.influx import InfluxClient
from collector.influx.server import InfluxServer
from engine.formats.log import read_consumed
from perf.exactness import committed_intervals
from engine.formats.batch import read_committed
from perf import e2e
from perf.exactness import check_exactness
from perf.fleet import Fleet, signals_ignored, wait_until
from perf.sysinfo import git_info, machine_summary

DB = "outage_bench"


def phase_figures(samples: list[e2e.Sample]) -> dict:
    """Mean and 5-s window rates of one phase's samples (pure arithmetic)."""
    t = e2e.throughput_figures(samples, warmup=0.0)
    return {"seconds": t.window_s, "processed_mean": round(t.processed_mean, 1),
            "processed_5s": t.processed_5s, "ingested_mean": round(t.ingested_mean, 1),
            "muted_share": round(t.muted_share, 3)}


def noise(rates_5s: list[float]) -> float:
    """Relative spread of the 5-s windows: (max - min) / median."""
    if len(rates_5s) < 2:
        return float("nan")
    return float((max(rates_5s) - min(rates_5s)) / np.median(rates_5s))


def metrics_check(client: InfluxClient, run_dir: Path) -> dict:
    """Compare the latency intervals in InfluxDB with those the committed batches hold."""
    run = (run_dir / "run_id").read_text().strip()
    want = committed_intervals(run_dir / "results", run)
    res = client.query('SELECT "count" FROM latency WHERE "run" = $run AND "step" != \'ingress\' '
                       'GROUP BY "step", "pipeline", "worker"', params={"run": run})
    got = Counter({(ts, s.tags["step"], s.tags["pipeline"], s.tags["worker"]): c
                   for s in res for ts, c in s.values})
    missing = [k for k in want if k not in got]
    wrong = [k for k in want if k in got and got[k] != want[k]]
    return {"run": run, "intervals_committed": len(want), "intervals_stored": len(got),
            "missing": len(missing), "wrong_count": len(wrong), "extra": len(set(got) - set(want)),
            "ok": not missing and not wrong and set(got) <= set(want)}


def run(args: argparse.Namespace, state_dir: Path) -> dict:
    """Run the whole path with an outage in the middle; return the figures."""
    influx = InfluxServer(state_dir / "influx", port=0, db=DB)
    influx.start()
    client = influx.client()
    env = {**client.config.as_env(), "MS_METRICS": "true"}
    nbbo, orders = e2e.ensure_input(state_dir / "data", args.symbols, wide_share=args.wide_share)
    cfg = e2e.BenchConfig(mode="throughput" if args.rate is None else "latency", duration=0,
                          warmup=args.warmup, rate=args.rate, symbols=args.symbols,
                          wide_share=args.wide_share, master=args.master, shards=args.shards,
                          max_rows_per_batch=args.max_rows_per_batch, max_backlog=args.max_backlog,
                          state_dir=str(state_dir))
    run_dir = state_dir / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "logs").mkdir(parents=True)
    fleet = Fleet(run_dir / "logs", cwd=run_dir, env=env)
    log_dir = run_dir / "ingress"
    phases: dict[str, list[e2e.Sample]] = {}
    try:
        ingress, ports = e2e.start_ingress(fleet, run_dir, cfg)
        job = e2e.start_job(fleet, run_dir, cfg)
        senders = e2e.start_senders(fleet, ports, {"nbbo": nbbo, "orders": orders}, cfg.rate)
        wait_until(lambda: read_consumed(log_dir) > 0, e2e.JOB_READY_TIMEOUT, "the first commit",
                       fleet.procs)
        print(f"outage: warm-up {args.warmup:g} s", flush=True)
        e2e.sample_run(log_dir, args.warmup, args.warmup, fleet.procs)
        phases["before"] = e2e.sample_run(log_dir, args.before, 0, fleet.procs)
        influx.stop()
        print(f"outage: InfluxDB stopped for {args.outage:g} s", flush=True)
        phases["during"] = e2e.sample_run(log_dir, args.outage, 0, fleet.procs)
        influx.start()
        print("outage: InfluxDB back", flush=True)
        phases["after"] = e2e.sample_run(log_dir, args.after, 0, fleet.procs)
        drain_s = e2e.stop_input_and_drain(fleet, senders, ingress, job, log_dir)
        fleet.stop(job, timeout=e2e.JOB_STOP_TIMEOUT, leader_only=True)
    finally:
        with signals_ignored():
            fleet.stop_all()
    frames, side = read_committed(run_dir / "results")
    exact = check_exactness(run_dir, frames, side, drain_s)
    check = metrics_check(client, run_dir)
    influx.stop()
    figs = {name: phase_figures(s) for name, s in phases.items()}
    before = figs["before"]["processed_mean"]
    return {"settings": vars(args), "config": asdict(cfg), "phases": figs,
            "during_over_before": round(figs["during"]["processed_mean"] / before, 4),
            "after_over_before": round(figs["after"]["processed_mean"] / before, 4),
            "noise_before_5s": round(noise(figs["before"]["processed_5s"]), 4),
            "exactness": asdict(exact), "metrics": check,
            "samples": {k: [asdict(s) for s in v] for k, v in phases.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.influx_outage", description=__doc__.split("\n\n")[0])
    p.add_argument("--outage", type=float, default=30.0, help="seconds InfluxDB is down (30)")
    p.add_argument("--before", type=float, default=30.0, help="seconds measured before the outage (30)")
    p.add_argument("--after", type=float, default=30.0, help="seconds measured after it (30)")
    p.add_argument("--warmup", type=float, default=20.0, help="seconds after the first commit, unmeasured (20)")
    e2e.add_job_arguments(p)
    p.set_defaults(rate=None)
    p.add_argument("--state-dir", type=Path, help="default: a temporary folder, removed afterwards")
    add_record_flag(p)
    args = p.parse_args(argv)
    temp = args.state_dir is None
    state_dir = Path(tempfile.mkdtemp(prefix="ms-outage-")) if temp else args.state_dir
    machine, git = machine_summary(), git_info(ROOT)
    try:
        res = run(args, state_dir)
    except (RuntimeError, TimeoutError) as e:
        print(f"outage: the run broke: {e}", file=sys.stderr)
        return 1
    finally:
        if temp:
            shutil.rmtree(state_dir, ignore_errors=True)
    path = result_path("influx-outage", args.record)
    stamp = path.stem.rsplit("-", 1)[-1]
    doc = {"benchmark": "influx-outage", "utc": stamp, "command": shlex.join([sys.executable, *sys.argv]),
           "git": git, "machine": dict(machine, loadavg_at_end=list(os.getloadavg())), **res}
    write_result(doc, path, default=str)
    ph = res["phases"]
    print(f"\nprocessed events/s: before {ph['before']['processed_mean']:,.0f}, during the outage "
          f"{ph['during']['processed_mean']:,.0f}, after {ph['after']['processed_mean']:,.0f}\n"
          f"during/before {res['during_over_before']:.3f}, after/before {res['after_over_before']:.3f}; "
          f"noise (5-s spread before) {res['noise_before_5s']:.3f}\n"
          f"exact: {res['exactness']['exact']}; metrics: {res['metrics']}\n-> {shown(path)}")
    return 0 if res["exactness"]["exact"] and res["metrics"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
