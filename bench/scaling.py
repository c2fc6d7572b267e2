"""What each resource of the Market Spread job costs per million events, on a standalone cluster.

    python -m bench.scaling                                   # shards 1,2,4 x 1 and 2 workers (~6-10 min)
    python -m bench.scaling --nbbo 250000 --orders 250000 --shards 1,2 --workers 1   # a quick look

The input behind the scaling model of docs/PERFORMANCE.md ("Scaling"). The ingress always
runs under `strace -f --seccomp-bpf -c -w -e trace=fsync,fdatasync` (only its fsync calls
stop it; strace sums their count and wall time) and `marketspread send` feeds it, one
connection per stream, with no job running. Its CPU is read from /proc (psutil), strace's
own left out.

1. The ingress alone (`--shards` largest N), `--ingress-seconds` each: two looping
   unthrottled senders (the events/s it accepts: its ceiling on this machine, the senders
   sharing its cores), then at `--ingress-rate`. Figures, from its first record logged to
   its last: events/s, CPU seconds per million events, fsyncs per second and per million
   events, the mean fsync, the share of its wall time spent in fsync, events per fsync.
2. Per shard count N and cluster size W (a master and W 1-core workers on loopback,
   perf/spark_cluster.py), in a fresh state folder: the ingress takes in the whole input
   once (the same figures, recorded), stops; then `marketspread job --master spark://...
   --shards N --max-rows-per-batch B` drains the log, with Spark's event log on
   (SPARK_CONF_DIR; read back for every batch's `StreamingQueryProgress`). From the first
   commit to the whole log committed (the JVMs' start-up and Spark's slow first batch left
   out): events/s; the driver's CPU (the job's process session: its Python and JVM) per
   batch and per million events; the executors' CPU (the workers' sessions without the
   worker daemons: executor JVMs and their Python workers) per million events; and the
   median and mean of each `durationMs` phase (queryPlanning, getBatch, latestOffset,
   walCommit, commitOffsets, addBatch, triggerExecution) over the batches after the first.
3. Exactness: the committed results against the plain-Python rule over the whole log
   (perf/exactness.py).

Written to bench/out/scaling-<UTC>.json (`--record`: bench/results/). Exit 0 whatever the
figures; 1 if a run broke or a result was not exact.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from perf.spark_cluster import start_cluster
from engine.formats.batch import read_committed
from engine.formats.log import read_consumed, read_head
from engine.ingress.stats import read_stats
from engine.tools.generate import generate
from perf.exactness import check_exactness
from perf.fleet import Fleet, Proc, log_tail, marketspread_cmd, signals_ignored, wait_until
from perf.scaling_figures import cpu_used, parse_strace_summary, per_million, phase_stats, progress_durations
from perf.sysinfo import git_info, machine_summary

JOB_READY = 240.0
INGEST = 600.0
DRAIN = 1800.0
POLL = 0.05                        # seconds between looks at the log counters
SETTLE = 0.5                       # seconds without a new record: the looping senders' last is logged
CPU_POLL = 0.2                     # seconds between CPU readings of the process sessions


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class IngressFigures:
    """The ingress taking in the whole input from two unthrottled senders, no job running."""
    events: int
    ingest_s: float                     # first record logged -> last
    events_per_s: float                 # the ceiling on this machine
    cpu_s: float                        # the ingress process (strace's own CPU left out)
    cpu_s_per_m: float
    senders_cpu_s: float
    fsyncs: int | None                  # None: strace not available or not asked for
    fsyncs_per_s: float | None
    fsyncs_per_m: float | None
    fsync_s: float | None               # wall time inside fsync calls
    fsync_mean_ms: float | None
    fsync_share: float | None           # fsync_s / ingest_s: the loop waiting on the disk
    events_per_fsync: float | None


@dataclass(frozen=True)
class DriverFigures:
    """The driver (the job's process session: Python and the driver JVM) while it drains the log."""
    batches: int                        # committed from the first commit on (the first batch not counted)
    events_per_batch: float
    cpu_s: float
    cpu_ms_per_batch: float
    cpu_s_per_m: float
    phase_median_ms: dict[str, float]   # Spark's durationMs per phase, batches after the first
    phase_mean_ms: dict[str, float]
    progress_events: int                # batches the event log had a progress for


@dataclass(frozen=True)
class ScalingRun:
    """One shard count on one cluster size."""
    shards: int
    workers: int
    events: int
    ingress: IngressFigures
    job_ready_s: float                  # spawn -> query running
    drain_s: float                      # query running -> whole log committed
    steady_s: float                     # first commit -> whole log committed
    steady_events: int
    steady_events_per_s: float
    driver: DriverFigures
    executors_cpu_s: float              # steady window
    executors_cpu_s_per_m: float
    executors_cpu_s_whole: float        # job spawn -> drained: executor JVM start and first batch included
    exact: bool
    committed: int
    expected: int
    first_difference: str | None
    loadavg_after: list[float] = field(default_factory=list)


# --------------------------------------------------------------------------- measuring

class SessionCpu:
    """Cumulative CPU seconds of every process ever seen in some sessions, by name.

    Polled often, so a process that ends between two looks loses at most one interval.
    """

    def __init__(self, sessions: dict[str, int], exclude: set[int] = frozenset()):
        self.sessions, self.exclude = dict(sessions), set(exclude)
        self.last: dict[str, dict[int, float]] = {n: {} for n in sessions}
        self.marks: dict[str, dict[str, dict[int, float]]] = {}

    def add(self, name: str, sid: int) -> None:
        """Follow one more session from now on (what it used before any mark counts as since it)."""
        self.sessions[name] = sid
        self.last[name] = {}
        for m in self.marks.values():
            m[name] = {}

    def poll(self) -> None:
        """Read the CPU of every live process of the sessions."""
        by_sid = {sid: name for name, sid in self.sessions.items()}
        for proc in psutil.process_iter():
            try:
                name = by_sid.get(os.getsid(proc.pid))
                if name is None or proc.pid in self.exclude:
                    continue
                t = proc.cpu_times()
            except (psutil.Error, OSError):
                continue
            self.last[name][proc.pid] = t.user + t.system

    def mark(self, label: str) -> None:
        """Poll and remember the readings as `label`."""
        self.poll()
        self.marks[label] = {n: dict(v) for n, v in self.last.items()}

    def since(self, label: str, name: str) -> float:
        """CPU seconds `name` used since the mark `label`, up to the last poll."""
        return cpu_used(self.marks[label][name], self.last[name])


def spawn_traced_ingress(fleet: Fleet, run_dir: Path, shards: int, strace: str | None) -> Proc:
    """Start `marketspread ingress` (under strace counting fsyncs, if given) in a session of its own."""
    args = ["ingress", "--state-dir", run_dir, "--nbbo-port", 0, "--orders-port", 0, "--no-metrics",
            "--shards", shards, "--max-backlog", 1 << 40]
    if strace is None:
        return fleet.spawn("ingress", args)
    argv = [strace, "-f", "--seccomp-bpf", "-c", "-w", "-e", "trace=fsync,fdatasync",
            "-o", str(run_dir / "fsync.txt"), *marketspread_cmd(), *map(str, args)]
    log = fleet.log_dir / "ingress.log"
    with open(log, "ab") as out:
        popen = subprocess.Popen(argv, cwd=fleet.cwd, env=fleet.env, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    fleet.procs.append(Proc("ingress", popen, log, tuple(argv)))
    return fleet.procs[-1]


def stop_traced_ingress(fleet: Fleet, ingress: Proc, traced: bool) -> None:
    """SIGTERM the ingress itself (strace then writes its summary and exits); raise if it failed."""
    if traced:
        for child in psutil.Process(ingress.popen.pid).children():
            child.send_signal(signal.SIGTERM)
        try:
            ingress.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    fleet.stop(ingress, timeout=30, leader_only=True)
    if ingress.popen.returncode != 0:
        raise RuntimeError(f"the ingress exited with {ingress.popen.returncode}: {log_tail(ingress.log_path)}")


def ingest(fleet: Fleet, run_dir: Path, shards: int, data: tuple[Path, Path], strace: str | None,
           send_args: tuple = (), expect: int | None = None) -> IngressFigures:
    """Run the ingress and two senders (`send_args`: e.g. `--loop --duration 5`; none: the input
    once, unthrottled), no job running; measure the ingress from its first record logged to its last."""
    log_dir = run_dir / "ingress"
    ingress = spawn_traced_ingress(fleet, run_dir, shards, strace)
    try:
        ports = wait_until(lambda: (lambda p: p if p and all(p.values()) else None)(
            (read_stats(log_dir) or {}).get("ports")), 60, "the ingress to listen", [ingress])
    except (RuntimeError, TimeoutError) as e:
        hint = " (where strace may not trace, run with --no-strace)" if strace else ""
        raise RuntimeError(f"{e}{hint}: {log_tail(ingress.log_path)}") from e
    cpu = SessionCpu({"ingress": ingress.popen.pid}, exclude={ingress.popen.pid} if strace else set())
    cpu.mark("start")
    senders = [fleet.spawn(f"send-{s}", ["send", "--port", ports[s], "--file", f, "--quiet", *send_args])
               for s, f in (("nbbo", data[0]), ("orders", data[1]))]
    for s in senders:
        cpu.add(s.name, s.popen.pid)
    t_first = t_last = None
    head, last_cpu = 0, 0.0
    deadline = time.monotonic() + INGEST
    while any(s.alive() for s in senders):
        now = time.monotonic()
        h = read_head(log_dir)
        if h != head:
            head, t_last = h, now
            t_first = t_first or now
        if now - last_cpu >= CPU_POLL:
            cpu.poll()
            last_cpu = now
        if not ingress.alive() or now > deadline:
            raise RuntimeError(f"the ingress {'exited' if not ingress.alive() else 'took too long'}: "
                               f"{log_tail(ingress.log_path)}")
        time.sleep(POLL / 5)
    for s in senders:
        if s.popen.returncode != 0:
            raise RuntimeError(f"{s.name} exited with {s.popen.returncode}: {log_tail(s.log_path)}")
    # A sender exits once its bytes are written; the ingress logs them a little later.
    while (read_head(log_dir) < expect) if expect else (time.monotonic() - (t_last or 0) < SETTLE):
        now, h = time.monotonic(), read_head(log_dir)
        if h != head:
            head, t_last = h, now
            t_first = t_first or now
        if not ingress.alive() or now > deadline:
            raise RuntimeError(f"the ingress logged {head:,} of {expect or '?'} events: {log_tail(ingress.log_path)}")
        time.sleep(POLL / 5)
    h = read_head(log_dir)
    if h != head:
        head, t_last = h, time.monotonic()
    cpu.poll()
    stop_traced_ingress(fleet, ingress, strace is not None)
    span = (t_last - t_first) if t_first and t_last and t_last > t_first else float("nan")
    ing_cpu = cpu.since("start", "ingress")
    send_cpu = sum(cpu.since("start", s.name) for s in senders)
    fs = None
    if strace:
        calls = parse_strace_summary((run_dir / "fsync.txt").read_text(errors="replace"))
        n = sum(c for c, _ in calls.values())
        secs = sum(s for _, s in calls.values())
        fs = (n, round(n / span, 1), round(per_million(n, head), 1), round(secs, 3),
              round(1e3 * secs / n, 3) if n else None, round(secs / span, 3), round(head / n, 1) if n else None)
    return IngressFigures(head, round(span, 3), round(head / span), round(ing_cpu, 3),
                          round(per_million(ing_cpu, head), 3), round(send_cpu, 3), *(fs or (None,) * 7))


def spark_conf_dir(run_dir: Path, event_log: bool = True) -> Path:
    """Write a spark-defaults.conf turning Spark's event log on (or leaving it off) into the run's folder."""
    conf, events = run_dir / "spark-conf", run_dir / "eventlog"
    conf.mkdir(parents=True, exist_ok=True)
    events.mkdir(parents=True, exist_ok=True)
    (conf / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled {str(event_log).lower()}\nspark.eventLog.dir file://{events}\n"
        "spark.eventLog.compress false\n")
    return conf


def ingress_alone(state: Path, shards: int, data: tuple[Path, Path], strace: str | None, seconds: float,
                  rate: int | None) -> IngressFigures:
    """The ingress alone for `seconds`: two looping senders, unthrottled (`rate` None: its ceiling) or at `rate`."""
    run_dir = state / f"ingress-{rate or 'max'}"
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "logs").mkdir(parents=True)
    fleet = Fleet(run_dir / "logs", cwd=run_dir, env={"PYTHONPATH": str(ROOT)})
    args = ("--loop", "--duration", seconds, *(("--rate", rate / 2) if rate else ()))
    try:
        return ingest(fleet, run_dir, shards, data, strace, args)
    finally:
        with signals_ignored():
            fleet.stop_all()
        shutil.rmtree(run_dir / "ingress", ignore_errors=True)      # up to GBs of log


def run_config(shards: int, workers: list[Proc], url: str, data: tuple[Path, Path], events: int, run_dir: Path,
               max_rows: int, strace: str | None, event_log: bool = True) -> ScalingRun:
    """Ingest the input, then drain it with a job of `shards` shards on the cluster; measure; check it."""
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "logs").mkdir(parents=True)
    fleet = Fleet(run_dir / "logs", cwd=run_dir, env={"PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1",
                                                       "SPARK_CONF_DIR": str(spark_conf_dir(run_dir, event_log))})
    log_dir = run_dir / "ingress"
    w = len(workers)
    try:
        ing = ingest(fleet, run_dir, shards, data, strace, expect=events)
        head = read_head(log_dir)
        print(f"scaling {shards}x{w}: ingress took {head:,} events in {ing.ingest_s:.2f} s "
              f"({ing.events_per_s:,.0f}/s, {ing.cpu_s_per_m:.2f} CPU s per M, {ing.fsyncs} fsyncs); "
              f"starting the job ...", flush=True)
        cpu = SessionCpu({f"w{i}": p.popen.pid for i, p in enumerate(workers)},
                         exclude={p.popen.pid for p in workers})
        cpu.mark("spawn")
        t0 = time.monotonic()
        job = fleet.spawn("job", ["job", "--state-dir", run_dir, "--master", url, "--shards", shards,
                                  "--no-metrics", "--keep-log", "--max-rows-per-batch", max_rows])
        cpu.add("job", job.popen.pid)
        wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"), JOB_READY,
                   "the job to start its query", [job], interval=0.1)
        t_ready = time.monotonic()
        wait_until(lambda: read_consumed(log_dir) > 0, DRAIN, "the first commit", [job], interval=0.02)
        cpu.mark("first")
        t_first, first_consumed = time.monotonic(), read_consumed(log_dir)
        last_cpu = 0.0

        def drained():
            nonlocal last_cpu
            if time.monotonic() - last_cpu >= CPU_POLL:
                cpu.poll()
                last_cpu = time.monotonic()
            return read_consumed(log_dir) >= head
        wait_until(drained, DRAIN, "the job to commit the whole log", [job], interval=0.02)
        t_done = time.monotonic()
        cpu.poll()
        fleet.stop(job, timeout=90, leader_only=True)
        if job.popen.returncode != 0:
            raise RuntimeError(f"the job exited with {job.popen.returncode}: {log_tail(job.log_path)}")
    finally:
        with signals_ignored():
            fleet.stop_all()
    lines = []
    for f in sorted(x for x in (run_dir / "eventlog").rglob("*") if x.is_file()):
        lines += f.read_text(errors="replace").splitlines()
    progress = progress_durations(lines)
    batch_ids = sorted(int(n) for n in os.listdir(run_dir / "checkpoint" / "commits") if n.isdigit())
    steady = [d for b, d in progress if b > batch_ids[0]]
    steady_batches = len(batch_ids) - 1
    steady_events = head - first_consumed
    drv_cpu = cpu.since("first", "job")
    exe_cpu = sum(cpu.since("first", f"w{i}") for i in range(w))
    exe_whole = sum(cpu.since("spawn", f"w{i}") for i in range(w))
    med, mean = phase_stats(steady)
    driver = DriverFigures(steady_batches, round(steady_events / steady_batches, 1) if steady_batches else 0.0,
                           round(drv_cpu, 3), round(1e3 * drv_cpu / steady_batches, 2) if steady_batches else 0.0,
                           round(per_million(drv_cpu, steady_events), 3), med, mean, len(progress))
    frames, side = read_committed(run_dir / "results")
    ex = check_exactness(run_dir, frames, side, t_done - t_ready)
    steady_s = t_done - t_first
    return ScalingRun(shards, w, head, ing, round(t_ready - t0, 3), round(t_done - t_ready, 3), round(steady_s, 3),
                      steady_events, round(steady_events / steady_s) if steady_s > 0 else 0, driver,
                      round(exe_cpu, 3), round(per_million(exe_cpu, steady_events), 3), round(exe_whole, 3),
                      ex.exact, ex.committed, ex.expected, ex.first_difference,
                      [round(x, 2) for x in os.getloadavg()])


# --------------------------------------------------------------------------- output

def ingress_summary(alone: dict[str, IngressFigures]) -> str:
    """The ingress-alone figures as a table."""
    head = (f"  {'ingress':>9}  {'events/s':>10}  {'CPU s/M':>7}  {'senders CPU s':>13}  {'fsync/s':>7}  "
            f"{'fsync/M':>7}  {'fsync ms':>8}  {'in fsync':>8}  {'events/fsync':>12}")
    def f(v, width: int, spec: str) -> str:
        return f"{'-' if v is None else format(v, spec):>{width}}"
    rows = [f"  {k:>9}  {i.events_per_s:>10,.0f}  {i.cpu_s_per_m:>7.2f}  {i.senders_cpu_s:>13.2f}  "
            f"{f(i.fsyncs_per_s, 7, ',.0f')}  {f(i.fsyncs_per_m, 7, ',.0f')}  {f(i.fsync_mean_ms, 8, '.2f')}  "
            f"{f(i.fsync_share, 8, '.0%')}  {f(i.events_per_fsync, 12, ',.0f')}" for k, i in alone.items()]
    return "\n".join([head, *rows])


def summary(runs: list[ScalingRun]) -> str:
    """The figures as a table: per million events unless said otherwise."""
    head = (f"  {'NxW':>4}  {'drain ev/s':>10}  {'drv ms/batch':>12}  {'plan ms':>7}  {'commit ms':>9}  "
            f"{'trig ms':>7}  {'exec CPU s/M':>12}  {'drv CPU s/M':>11}  exact")
    rows = []
    for r in runs:
        d = r.driver
        rows.append(
            f"  {r.shards:>2}x{r.workers:<1}  {r.steady_events_per_s:>10,.0f}  {d.cpu_ms_per_batch:>12.1f}  "
            f"{d.phase_median_ms.get('queryPlanning', float('nan')):>7.0f}  "
            f"{d.phase_median_ms.get('commitOffsets', float('nan')):>9.0f}  "
            f"{d.phase_median_ms.get('triggerExecution', float('nan')):>7.0f}  "
            f"{r.executors_cpu_s_per_m:>12.2f}  {d.cpu_s_per_m:>11.2f}  {r.exact}")
    return "\n".join([head, *rows])


def _raise_interrupt(*_):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Start each cluster size, run each shard count on it, print and write the figures."""
    argv = sys.argv if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n")[0],
                                epilog="Figures: docs/PERFORMANCE.md, 'Scaling'; bench/README.md, 'scaling'.")
    p.add_argument("--nbbo", type=int, default=2_000_000, help="NBBO messages of the input (2000000)")
    p.add_argument("--orders", type=int, default=2_000_000, help="orders of the input (2000000)")
    p.add_argument("--symbols", type=int, default=2_000)
    p.add_argument("--wide-share", type=float, default=0.1)
    p.add_argument("--shards", default="1,2,4", help="shard counts, in order (default 1,2,4)")
    p.add_argument("--workers", default="1,2", help="cluster sizes in 1-core workers, in order (default 1,2)")
    p.add_argument("--max-rows-per-batch", type=int, default=100_000,
                   help="the job's largest micro-batch (100000: ~40 batches per 4M events)")
    p.add_argument("--ingress-seconds", type=float, default=5.0,
                   help="seconds of each ingress-alone run: unthrottled, then at --ingress-rate (5)")
    p.add_argument("--ingress-rate", type=int, default=50_000,
                   help="events/s offered in the second ingress-alone run (50000)")
    p.add_argument("--no-event-log", action="store_true",
                   help="leave Spark's event log off: the driver's CPU without it, no durationMs phases")
    p.add_argument("--no-strace", action="store_true", help="do not count the ingress' fsyncs with strace")
    p.add_argument("--state-dir", type=Path, help="default: a temp folder, deleted afterwards")
    p.add_argument("--keep", action="store_true", help="keep the state folder (logs, event logs, results)")
    add_record_flag(p)
    args = p.parse_args(argv[1:])
    java = shutil.which("java")
    if java is None:
        print("scaling: java is not installed (scripts/setup installs Java 17)", file=sys.stderr)
        return 1
    strace = None if args.no_strace else shutil.which("strace")
    if strace is None and not args.no_strace:
        print("scaling: strace not found: no fsync figures", file=sys.stderr)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    temp = args.state_dir is None
    state = (Path(tempfile.mkdtemp(prefix="ms-scaling-")) if temp else args.state_dir).resolve()
    machine, git = machine_summary(), git_info(ROOT)
    runs: list[ScalingRun] = []
    alone: dict[str, IngressFigures] = {}
    t_start = time.monotonic()
    try:
        data = (state / "data" / "nbbo.msg", state / "data" / "orders.msg")
        data[0].parent.mkdir(parents=True, exist_ok=True)
        gen = generate(*data, symbols=args.symbols, nbbo=args.nbbo, orders=args.orders,
                       wide_share=args.wide_share, seed=1)
        shard_list = [int(x) for x in args.shards.split(",")]
        for rate in (None, args.ingress_rate):
            ing = ingress_alone(state, max(shard_list), data, strace, args.ingress_seconds, rate)
            alone[str(rate or "max")] = ing
            print(f"scaling: the ingress alone, {'unthrottled' if rate is None else f'{rate:,} events/s offered'}: "
                  f"{ing.events_per_s:,.0f} events/s, {ing.cpu_s_per_m:.2f} CPU s per M, "
                  f"{ing.fsyncs_per_s} fsyncs/s ({ing.fsync_share} of its time in fsync)", flush=True)
        for w in (int(x) for x in args.workers.split(",")):
            where = state / f"cluster-{w}"
            (where / "logs").mkdir(parents=True, exist_ok=True)
            cluster_fleet = Fleet(where / "logs", cwd=where, env={"PYTHONPATH": str(ROOT)})
            try:
                cluster = start_cluster(cluster_fleet, java, where, workers=w)
                print(f"scaling: {cluster.url} with {w} 1-core worker(s)", flush=True)
                for n in shard_list:
                    r = run_config(n, cluster.workers, cluster.url, data, gen.nbbo + gen.orders, state / f"run-{n}x{w}",
                                   args.max_rows_per_batch, strace, not args.no_event_log)
                    runs.append(r)
                    print(f"scaling {n}x{w}: drained at {r.steady_events_per_s:,.0f} events/s from the first "
                          f"commit; driver {r.driver.cpu_ms_per_batch:.0f} ms CPU per batch of "
                          f"{r.driver.events_per_batch:,.0f}; executors {r.executors_cpu_s_per_m:.2f} CPU s per M; "
                          f"exact {r.exact}", flush=True)
            finally:
                with signals_ignored():
                    cluster_fleet.stop_all()
    except KeyboardInterrupt:
        print("scaling: interrupted; all processes stopped", file=sys.stderr)
        return 130
    except (RuntimeError, TimeoutError, ValueError, OSError) as e:
        print(f"scaling: run failed: {e}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"scaling: state kept in {state}", file=sys.stderr)
        elif temp:
            shutil.rmtree(state, ignore_errors=True)
    path = result_path("scaling", args.record)
    doc = {"benchmark": "scaling", "utc": path.stem.rsplit("-", 1)[-1], "command": shlex.join([sys.executable, *argv]),
           "git": git, "machine": dict(machine, loadavg_at_end=list(os.getloadavg())),
           "wall_s": round(time.monotonic() - t_start, 1),
           "config": {"worker_cores": 1, "nbbo": args.nbbo, "orders": args.orders, "symbols": args.symbols,
                      "wide_share": args.wide_share, "max_rows_per_batch": args.max_rows_per_batch,
                      "strace": strace is not None, "event_log": not args.no_event_log},
           "ingress_alone": {k: asdict(v) for k, v in alone.items()},
           "runs": [asdict(r) for r in runs]}
    write_result(doc, path)
    exact = all(r.exact for r in runs)
    print(f"\nscaling (commit {(git['commit'] or '?')[:10]}{', dirty' if git['dirty'] else ''}; load average "
          f"{machine['loadavg_at_start'][0]:.1f} at start, {os.getloadavg()[0]:.1f} at end):\n"
          f"{ingress_summary(alone)}\n{summary(runs)}\n"
          f"  -> {shown(path)}", flush=True)
    if not exact:
        print("scaling: a run's results were NOT exact", file=sys.stderr)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
