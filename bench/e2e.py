"""Whole-path benchmark of the Market Spread job: senders -> TCP ingress -> Spark -> result files.

It runs the processes a user runs (`marketspread ingress`, `marketspread job`,
`marketspread send`), each in a session of its own, on generated input that loops.

    python -m bench.e2e throughput [--duration 60] [--warmup 20]   # unthrottled senders
    python -m bench.e2e latency --rate 50000 [--duration 60]       # offered load, events/s
    python -m bench.e2e all [--duration 60] --record               # both; kept in bench/results/

Throughput samples the job's committed offset (`consumed`) every second; latency takes
the results of orders that arrived in the measurement window (result timestamp, or
batch commit time, minus ingest time). Afterwards every run checks the committed
results against a plain-Python reference of the rule over the whole ingress log in
arrival order. The run itself is perf/e2e.py. Figures are printed and written to
bench/out/ (bench/results/ with `--record`); a benchmark never fails on a timing (exit 0
even when a figure is poor; 1 if the run itself broke).
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from perf.e2e import (SAMPLE_EVERY, WINDOW, ModeResult, add_job_arguments, cleanup, ensure_input, mode_configs,
                      raise_interrupt, run_mode)
from perf.sysinfo import git_info, machine_summary

def summary(res: ModeResult) -> str:
    """Format a mode's figures as a table."""
    c, t, e = res.config, res.throughput, res.exactness
    rows = [("mode", c.mode), ("offered", f"{c.rate:,} events/s" if c.rate else "unthrottled"),
            ("master / shards", f"{c.master} / {c.shards}"),
            ("start", f"job ready {res.startup.job_ready_s:.1f} s, first commit "
                      f"{res.startup.first_commit_s:.1f} s after the senders started"),
            ("window", f"{t.window_s:.0f} s after {c.warmup:g} s warm-up"),
            ("processed, mean", f"{t.processed_mean:,.0f} events/s"),
            ("processed, median of 5-s", f"{t.processed_median_5s:,.0f} events/s"),
            ("ingested, mean", f"{t.ingested_mean:,.0f} events/s"),
            ("backlog at window end", f"{t.backlog_end:,} records"),
            ("ingress muted", f"{t.muted_share:.0%} of samples, {t.mute_episodes} episodes, "
                              f"{t.muted_seconds:.1f} s")]
    for lat in (res.latency_written, res.latency_committed):
        if lat:
            rows.append((f"latency to {lat.basis} (ms)",
                         f"p50 {lat.p50_ms:.0f}  p90 {lat.p90_ms:.0f}  p99 {lat.p99_ms:.0f}  "
                         f"p99.9 {lat.p999_ms:.0f}  max {lat.max_ms:.0f}  (n={lat.count:,})"))
    if res.cadence:
        cd = res.cadence
        size = f", median {cd.records_per_batch_median:,.0f} records" if cd.records_per_batch_median else ""
        rows.append(("batches", f"{cd.batches_per_s:.2f}/s, gap median {cd.gap_median_ms:.0f} ms, "
                                f"p90 {cd.gap_p90_ms:.0f} ms, max {cd.gap_max_ms:.0f} ms{size}"))
    rows += [("exact", f"{e.exact}: {e.committed:,} committed vs {e.expected:,} expected, "
                       f"{e.duplicate_seqs} duplicate seqs"),
             ("log checked", f"{e.events:,} events ({e.nbbo:,} NBBO, {e.orders:,} orders), "
                             f"{e.bad_frames} bad frames"),
             ("drain after senders stop", f"{e.drain_s:.1f} s")]
    if res.cpu:
        rows.append(("CPU, % of a core", ", ".join(f"{k} {v:.0f}" for k, v in res.cpu.items())
                     + f"; total {sum(res.cpu.values()):.0f}"))
    if e.first_difference:
        rows.append(("first difference", e.first_difference))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def write_json(res: ModeResult, machine: dict, git: dict, argv: list[str], record: bool) -> Path:
    """Write a mode's figures, config, machine and commit to bench/out/ (bench/results/ with --record)."""
    path = result_path(f"e2e-{res.config.mode}", record)
    doc = {"benchmark": "e2e", "mode": res.config.mode, "utc": path.stem.rsplit("-", 1)[-1],
           "command": shlex.join([sys.executable, *argv]), "git": git,
           "machine": dict(machine, loadavg_at_end=list(os.getloadavg())),
           "config": asdict(res.config), "startup": asdict(res.startup),
           "throughput": asdict(res.throughput),
           "latency_written": res.latency_written and asdict(res.latency_written),
           "latency_committed": res.latency_committed and asdict(res.latency_committed),
           "cadence": res.cadence and asdict(res.cadence), "exactness": asdict(res.exactness),
           "cpu_percent_of_core": res.cpu, "samples": [asdict(s) for s in res.samples]}
    return write_result(doc, path)


# --------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    """Return the benchmark's argument parser."""
    p = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("throughput", "latency", "all"))
    p.add_argument("--duration", type=float, default=60.0, help="seconds measured after the warm-up (60)")
    p.add_argument("--warmup", type=float, help="seconds before measuring (throughput 20, latency 15)")
    add_job_arguments(p)
    p.add_argument("--state-dir", type=Path, help="where input, logs and results go (default: a temp folder)")
    p.add_argument("--keep", action="store_true", help="keep the state dir afterwards")
    add_record_flag(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the chosen modes; print and write their figures."""
    argv = sys.argv if argv is None else argv
    args = build_parser().parse_args(argv[1:])
    if args.duration < WINDOW * SAMPLE_EVERY or (args.warmup is not None and args.warmup < 0):
        raise SystemExit(f"e2e: --duration must be at least {WINDOW * SAMPLE_EVERY:g} s, --warmup >= 0")
    signal.signal(signal.SIGTERM, raise_interrupt)
    temp = args.state_dir is None
    state_dir = (Path(tempfile.mkdtemp(prefix="ms-e2e-")) if temp else args.state_dir).resolve()
    machine, git = machine_summary(), git_info(ROOT)
    try:
        nbbo, orders = ensure_input(state_dir / "data", args.symbols, wide_share=args.wide_share)
        for cfg in mode_configs(args, state_dir):
            run_dir = state_dir / f"run-{cfg.mode}"
            res = run_mode(cfg, {"nbbo": nbbo, "orders": orders}, run_dir)
            if not args.keep:              # a throughput run's log is gigabytes
                shutil.rmtree(run_dir, ignore_errors=True)
            path = write_json(res, machine, git, argv, args.record)
            print(f"\ne2e {cfg.mode} (commit {(git['commit'] or '?')[:10]}{', dirty' if git['dirty'] else ''}):\n"
                  f"{summary(res)}\n  -> {shown(path)}\n", flush=True)
    except KeyboardInterrupt:
        print("e2e: interrupted; all processes stopped", file=sys.stderr)
        return 130
    except (RuntimeError, TimeoutError) as e:
        print(f"e2e: run failed: {e}", file=sys.stderr)
        return 1
    finally:
        cleanup(state_dir, temp, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
