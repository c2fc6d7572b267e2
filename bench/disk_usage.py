"""Disk use with retention on: bytes per million events and the state folder's size over time.

    python -m bench.disk_usage [--duration 1800] [--rate 100000] [--results-retention 5m] [--every 10]

perf/e2e.py's whole path with the job's defaults (metrics on, to a real InfluxDB on a free
loopback port; log retention on) and the given results retention, two looping senders
at `--rate` events/s in all. Every `--every` s it records the events committed and the
disk space (allocated blocks) of each part of the state folder: the ingress log, the
result batches, the checkpoint, Spark's scratch folder and the rest.

Figures: bytes written per million events (the log's 64 B per event; the results'
growth per event measured before the retention's first deletion; the checkpoint's), the
state folder's size over time and its peak after the results retention filled up. They
give the disk formula its numbers. Writes bench/out/disk-usage-<UTC>.json (`--record`:
bench/results/); never fails on a figure.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from collector.influx.server import InfluxServer
from engine.formats.log import RECORD_BYTES, read_consumed, read_head, segment_firsts
from engine.formats.batch import retained_from
from perf.sysinfo import allocated_bytes
from engine.storage.retention import parse_duration_s
from perf import e2e
from perf.fleet import Fleet, check_alive, signals_ignored, wait_until
from perf.sysinfo import git_info, machine_summary

DB = "disk"
PARTS = ("ingress", "results", "checkpoint")


@dataclass(frozen=True)
class DiskSample:
    """One look at the state folder."""
    t: float                           # seconds since the job's first commit
    consumed: int
    head: int
    bytes: dict[str, int]              # allocated bytes per part, plus "other" and "total"
    segments: int                      # log segments on disk
    results_from: int                  # first result batch kept



def take(t: float, run_dir: Path) -> DiskSample:
    """Measure the state folder (the run folder without the bench's own process logs)."""
    parts = {p: allocated_bytes(run_dir / p) for p in PARTS}
    rest = [e for e in os.scandir(run_dir) if e.name not in (*PARTS, "logs")]
    parts["other"] = sum(allocated_bytes(Path(e.path)) if e.is_dir() else e.stat().st_blocks * 512 for e in rest)
    parts["total"] = sum(parts.values())
    return DiskSample(round(t, 1), read_consumed(run_dir / "ingress"), read_head(run_dir / "ingress"), parts,
                      len(segment_firsts(run_dir / "ingress")), retained_from(run_dir / "results"))


def run(state_dir: Path, duration: float, rate: int, every: float, retention: str, retention_bytes: str,
        symbols: int = 350) -> list[DiskSample]:
    """Run the whole path at `rate` for `duration` s with retention on; return the samples."""
    influx = InfluxServer(state_dir / "influx", port=0, db=DB)
    influx.start()
    nbbo, orders = e2e.ensure_input(state_dir / "data", symbols, wide_share=0.1)
    run_dir = state_dir / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "logs").mkdir(parents=True)
    fleet = Fleet(run_dir / "logs", cwd=run_dir,
                      env={"MS_INFLUX_URL": influx.url, "MS_INFLUX_DB": DB, "MS_METRICS": "true"})
    cfg = e2e.BenchConfig(mode="latency", duration=duration, warmup=0, rate=rate, symbols=symbols,
                          wide_share=0.1, master="local[*]", shards=1, max_rows_per_batch=None,
                          max_backlog=1_000_000, state_dir=str(state_dir))
    samples: list[DiskSample] = []
    try:
        ingress, ports = e2e.start_ingress(fleet, run_dir, cfg)
        job = fleet.spawn("job", ["job", "--state-dir", run_dir, "--results-retention", retention,
                                  "--results-retention-bytes", retention_bytes])
        wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"),
                       e2e.JOB_READY_TIMEOUT, "the job to start its query", fleet.procs, interval=0.5)
        e2e.start_senders(fleet, ports, {"nbbo": nbbo, "orders": orders}, rate)
        wait_until(lambda: read_consumed(run_dir / "ingress") > 0, e2e.JOB_READY_TIMEOUT,
                       "the first commit", fleet.procs)
        t0 = time.monotonic()
        for k in range(int(duration / every) + 1):
            time.sleep(max(0.0, t0 + k * every - time.monotonic()))
            check_alive(fleet.procs)
            s = take(time.monotonic() - t0, run_dir)
            samples.append(s)
            if k % max(1, int(60 / every)) == 0:
                b = s.bytes
                print(f"[{s.t:6.0f} s] committed {s.consumed:,} (backlog {s.head - s.consumed:,}); state "
                      f"{b['total'] / 2**20:,.1f} MiB: log {b['ingress'] / 2**20:,.1f} ({s.segments} segments), "
                      f"results {b['results'] / 2**20:,.1f} (from batch {s.results_from:,}), checkpoint "
                      f"{b['checkpoint'] / 2**20:,.1f}, other "
                      f"{b['other'] / 2**20:,.2f}", flush=True)
        fleet.stop(job, timeout=e2e.JOB_STOP_TIMEOUT, leader_only=True)
    finally:
        with signals_ignored():
            fleet.stop_all()
        influx.stop()
    return samples


def figures(samples: list[DiskSample], retention_s: float | None) -> dict:
    """Bytes per million events and the state folder's size over the run."""
    first, last = samples[0], samples[-1]
    events = last.consumed - first.consumed
    seconds = last.t - first.t
    # Results grow by what the job writes until retention starts deleting: that slope is
    # the results' bytes per event; the log's is fixed (64 B), the checkpoint's plateaus.
    growing = [s for s in samples if s.results_from == 0 and s.t > 0]
    res_per_m = None
    if len(growing) >= 2 and growing[-1].consumed > growing[0].consumed:
        res_per_m = ((growing[-1].bytes["results"] - growing[0].bytes["results"])
                     / (growing[-1].consumed - growing[0].consumed) * 1e6)
    # "Filled": a minute after the first batches reached the retention's age.
    settled = [s for s in samples if retention_s is None or s.t >= retention_s + 60] or samples[-1:]
    totals = [s.bytes["total"] for s in settled]
    thirds = max(1, len(settled) // 3)
    return {
        "events": events, "seconds": round(seconds, 1), "events_per_s": round(events / seconds) if seconds else None,
        "log_bytes_per_million_events": RECORD_BYTES * 1_000_000,
        "results_bytes_per_million_events": round(res_per_m) if res_per_m is not None else None,
        "written_bytes_per_million_events": (RECORD_BYTES * 1_000_000 + round(res_per_m or 0)),
        "written_total_bytes": last.head * RECORD_BYTES + round((res_per_m or 0) * last.consumed / 1e6),
        "state_after_retention_filled": {
            "from_s": settled[0].t if settled else None,
            "min_bytes": min(totals), "max_bytes": max(totals),
            "first_third_max_bytes": max(totals[:thirds]), "last_third_max_bytes": max(totals[-thirds:]),
        },
        "peak_bytes": {k: max(s.bytes[k] for s in samples) for k in (*PARTS, "other", "total")},
        "max_segments": max(s.segments for s in samples),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.disk_usage", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=1800.0, help="seconds of steady load (1800)")
    p.add_argument("--rate", type=int, default=100_000, help="events/s over both streams (100000)")
    p.add_argument("--every", type=float, default=10.0, help="seconds between samples (10)")
    p.add_argument("--results-retention", default="5m", help="the job's --results-retention (5m)")
    p.add_argument("--results-retention-bytes", default="10GiB", help="the job's --results-retention-bytes")
    p.add_argument("--state-dir", type=Path, help="where to run (default: a temp folder, removed)")
    add_record_flag(p)
    args = p.parse_args(argv)
    temp = args.state_dir is None
    state_dir = Path(tempfile.mkdtemp(prefix="ms-disk-")) if temp else args.state_dir
    try:
        samples = run(state_dir, args.duration, args.rate, args.every, args.results_retention,
                      args.results_retention_bytes)
    except (RuntimeError, TimeoutError) as e:
        print(f"disk_usage: the run broke: {e}", file=sys.stderr)
        return 1
    finally:
        if temp:
            shutil.rmtree(state_dir, ignore_errors=True)
    fig = figures(samples, parse_duration_s(args.results_retention))
    st = fig["state_after_retention_filled"]
    print(f"disk_usage: {fig['events']:,} events in {fig['seconds']:.0f} s ({fig['events_per_s']:,}/s); "
          f"per million events: log {fig['log_bytes_per_million_events'] / 2**20:.1f} MiB (deleted once committed), "
          f"results {(fig['results_bytes_per_million_events'] or 0) / 2**20:.2f} MiB (kept {args.results_retention}); "
          f"state folder after the retention filled: {st['min_bytes'] / 2**20:,.1f}.."
          f"{st['max_bytes'] / 2**20:,.1f} MiB "
          f"(first third max {st['first_third_max_bytes'] / 2**20:,.1f}, last third max "
          f"{st['last_third_max_bytes'] / 2**20:,.1f}); written in all {fig['written_total_bytes'] / 2**30:,.1f} GiB",
          flush=True)
    path = write_result({
        "argv": sys.argv, "git": git_info(ROOT), "machine": machine_summary(),
        "config": {"duration": args.duration, "rate": args.rate, "every": args.every,
                   "results_retention": args.results_retention,
                   "results_retention_bytes": args.results_retention_bytes},
        "figures": fig, "samples": [asdict(s) for s in samples]}, result_path("disk-usage", args.record))
    print(f"disk_usage: wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
