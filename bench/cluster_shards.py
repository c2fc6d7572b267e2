"""The job on a real standalone cluster with 1, 2, 4 shards: throughput and bytes read per event.

    python -m bench.cluster_shards                          # 1M NBBO + 1M orders, 2,000 symbols
    python -m bench.cluster_shards --nbbo 250000 --orders 250000 --shards 1,2   # a quick look

A master and two 1-core workers on loopback (bench/spark_cluster.py, as
tests/reliability/test_cluster.py starts them). Per shard count N, in a fresh state
folder: `marketspread ingress --shards N` takes in the whole input (every NBBO before any
order) with no job running; then `marketspread job --master spark://... --shards N`
starts and drains the log. The ingress stays up (idle) meanwhile, as in a live run.

Figures per N: events; the drain's wall time from the job's query running to the whole
log committed, and events/s over it; the same from the first commit on (Spark's slow
first batch left out); bytes the job's tasks read per event (the job's own counter, a
Spark accumulator it logs at stop: 64 when one task reads the log, ~72 when each task
reads its shard's file, 64 x N if the tasks fell back to the log); and whether the
committed results equal the plain-Python reference over the log (perf/exactness.py).
Written to bench/out/cluster-shards-<UTC>.json (`--record`: bench/results/). Exit 0
whatever the figures, 1 if a run broke.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from perf.spark_cluster import job_bytes_read, start_cluster
from engine.formats.log import read_consumed, read_head
from engine.ingress.stats import read_stats
from engine.formats.batch import read_committed
from engine.tools.generate import generate
from engine.tools.sender import send_acknowledged
from perf.exactness import check_exactness
from perf.fleet import Fleet, log_tail, wait_until
from perf.sysinfo import git_info, machine_summary

WORKERS = 2
JOB_READY = 240.0
DRAIN = 1800.0


@dataclass(frozen=True)
class ShardRun:
    """One shard count's figures."""
    shards: int
    shard_files: bool             # False: the ingress wrote none (--compare-log), the tasks read the log
    events: int
    ingest_s: float
    job_ready_s: float
    drain_s: float                # query running -> whole log committed
    events_per_s: float
    steady_s: float               # first commit -> whole log committed
    steady_events_per_s: float
    bytes_read: int
    bytes_per_event: float
    exact: bool
    committed: int
    expected: int
    first_difference: str | None


def _send(port: int, path: Path) -> None:
    send_acknowledged("127.0.0.1", port, path.read_bytes())


def run_shards(n: int, url: str, data: tuple[Path, Path], run_dir: Path, max_rows: int,
               shard_files: bool = True) -> ShardRun:
    """Ingest the input, then drain it with a job of `n` shards on the cluster; check it.

    `shard_files` False: the ingress runs with one shard, so it writes no shard files and
    each task reads the whole log range, as before they existed.
    """
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "logs").mkdir(parents=True)
    fleet = Fleet(run_dir / "logs", cwd=run_dir, env={"PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"})
    log_dir = run_dir / "ingress"
    try:
        ingress = fleet.spawn("ingress", ["ingress", "--state-dir", run_dir, "--nbbo-port", 0, "--orders-port", 0,
                                          "--no-metrics", "--shards", n if shard_files else 1,
                                          "--max-backlog", 1 << 40])
        ports = wait_until(lambda: (read_stats(log_dir) or {}).get("ports"), 60, "the ingress", [ingress])
        t0 = time.monotonic()
        _send(ports["nbbo"], data[0])
        _send(ports["orders"], data[1])
        ingest_s = time.monotonic() - t0
        head = read_head(log_dir)
        print(f"cluster-shards {n}: {head:,} events in the log in {ingest_s:.1f} s; starting the job ...", flush=True)
        t0 = time.monotonic()
        job = fleet.spawn("job", ["job", "--state-dir", run_dir, "--master", url, "--shards", n, "--no-metrics",
                                  "--keep-log", "--max-rows-per-batch", max_rows, "--count-bytes-read"])
        wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"), JOB_READY,
                   "the job to start its query", [job, ingress], interval=0.1)
        t_ready = time.monotonic()
        first = wait_until(lambda: read_consumed(log_dir) and (time.monotonic(), read_consumed(log_dir)),
                           DRAIN, "the first commit", [job, ingress], interval=0.02)
        wait_until(lambda: read_consumed(log_dir) >= head, DRAIN, "the job to commit the whole log",
                   [job, ingress], interval=0.02)
        t_done = time.monotonic()
        fleet.stop(job, timeout=90, leader_only=True)
        if job.popen.returncode != 0:
            raise RuntimeError(f"the job exited with {job.popen.returncode}: {log_tail(job.log_path)}")
        fleet.stop(ingress, timeout=30, leader_only=True)
    finally:
        fleet.stop_all()
    read, _ = job_bytes_read(job.log_path)
    frames, side = read_committed(run_dir / "results")
    ex = check_exactness(run_dir, frames, side, t_done - t_ready)
    drain, steady = t_done - t_ready, t_done - first[0]
    return ShardRun(n, shard_files, head, round(ingest_s, 3), round(t_ready - t0, 3), round(drain, 3), round(head / drain),
                    round(steady, 3), round((head - first[1]) / steady) if steady > 0 else 0, read,
                    round(read / head, 2), ex.exact, ex.committed, ex.expected, ex.first_difference)


def _label(r: ShardRun) -> str:
    return f"{r.shards}" if r.shard_files or r.shards == 1 else f"{r.shards} (log)"


def summary(runs: list[ShardRun]) -> str:
    """The figures as a table."""
    head = f"  {'shards':>10}  {'events':>10}  {'drain s':>8}  {'events/s':>10}  {'steady ev/s':>11}  " \
           f"{'bytes/event':>11}  exact"
    rows = [f"  {_label(r):>10}  {r.events:>10,}  {r.drain_s:>8.1f}  {r.events_per_s:>10,.0f}  "
            f"{r.steady_events_per_s:>11,.0f}  {r.bytes_per_event:>11.1f}  {r.exact}" for r in runs]
    return "\n".join([head, *rows])


def _raise_interrupt(*_):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Start the cluster, run each shard count, print and write the figures."""
    argv = sys.argv if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.cluster_shards", description=__doc__.split("\n")[0])
    p.add_argument("--nbbo", type=int, default=1_000_000)
    p.add_argument("--orders", type=int, default=1_000_000)
    p.add_argument("--symbols", type=int, default=2_000)
    p.add_argument("--wide-share", type=float, default=0.1)
    p.add_argument("--shards", default="1,2,4", help="shard counts to run, in order (default 1,2,4)")
    p.add_argument("--max-rows-per-batch", type=int, default=100_000)
    p.add_argument("--compare-log", action="store_true",
                   help="also run each N > 1 without shard files (the tasks read the log ranges, as before)")
    p.add_argument("--state-dir", type=Path, help="default: a temp folder, deleted afterwards")
    p.add_argument("--keep", action="store_true", help="keep the state folder (logs, shard files, results)")
    add_record_flag(p)
    args = p.parse_args(argv[1:])
    java = shutil.which("java")
    if java is None:
        print("cluster-shards: java is not installed (scripts/setup installs Java 17)", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _raise_interrupt)
    temp = args.state_dir is None
    state = (Path(tempfile.mkdtemp(prefix="ms-cluster-shards-")) if temp else args.state_dir).resolve()
    machine, git = machine_summary(), git_info(ROOT)
    cluster_fleet = Fleet(state / "cluster" / "logs", cwd=state / "cluster", env={"PYTHONPATH": str(ROOT)})
    runs: list[ShardRun] = []
    try:
        (state / "cluster" / "logs").mkdir(parents=True, exist_ok=True)
        data = (state / "data" / "nbbo.msg", state / "data" / "orders.msg")
        data[0].parent.mkdir(parents=True, exist_ok=True)
        generate(*data, symbols=args.symbols, nbbo=args.nbbo, orders=args.orders, wide_share=args.wide_share,
                 seed=1)
        cluster = start_cluster(cluster_fleet, java, state / "cluster", workers=WORKERS)
        print(f"cluster-shards: {cluster.url} with {WORKERS} 1-core workers", flush=True)
        plan = [(int(x), True) for x in args.shards.split(",")]
        plan += [(n, False) for n, _ in plan if n > 1 and args.compare_log]
        for n, files in plan:
            runs.append(run_shards(n, cluster.url, data, state / f"shards-{n}", args.max_rows_per_batch, files))
            r = runs[-1]
            print(f"cluster-shards {n}{'' if files else ' (log)'}: drained in {r.drain_s:.1f} s ({r.events_per_s:,.0f} events/s, "
                  f"{r.steady_events_per_s:,.0f} from the first commit), {r.bytes_per_event:.1f} bytes/event, "
                  f"exact {r.exact}", flush=True)
    except KeyboardInterrupt:
        print("cluster-shards: interrupted; all processes stopped", file=sys.stderr)
        return 130
    except (RuntimeError, TimeoutError, ValueError) as e:
        print(f"cluster-shards: run failed: {e}", file=sys.stderr)
        return 1
    finally:
        cluster_fleet.stop_all()
        if args.keep:
            print(f"cluster-shards: state kept in {state}", file=sys.stderr)
        elif temp:
            shutil.rmtree(state, ignore_errors=True)
    path = result_path("cluster-shards", args.record)
    stamp = path.stem.rsplit("-", 1)[-1]
    doc = {"benchmark": "cluster-shards", "utc": stamp, "command": shlex.join([sys.executable, *argv]),
           "git": git, "machine": dict(machine, loadavg_at_end=list(os.getloadavg())),
           "config": {"workers": WORKERS, "worker_cores": 1, "nbbo": args.nbbo, "orders": args.orders,
                      "symbols": args.symbols, "wide_share": args.wide_share,
                      "max_rows_per_batch": args.max_rows_per_batch},
           "runs": [asdict(r) for r in runs]}
    write_result(doc, path)
    print(f"\ncluster-shards (commit {(git['commit'] or '?')[:10]}{', dirty' if git['dirty'] else ''}):\n{summary(runs)}\n"
          f"  -> {shown(path)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
