"""`marketspread bench`: one automated performance-test run, recorded for comparison.

Starts InfluxDB if `MS_INFLUX_URL` is not set (the project's own server, as the demo
does), a result receiver, the ingress and the job (`--forward` to the receiver) in a
fresh state folder whose run id names the run, then two looping senders at the given
rate. It samples the job's progress and the CPU and memory of the job's and the
ingress' process trees every second, stops everything (senders, ingress, then the job,
which ships its last metrics), reads each step's latency over the measurement window
back from InfluxDB, and records the run (perf/record.py) as a JSON file and as
InfluxDB points. The run's own state folder (log, checkpoint, results) is deleted
afterwards unless `--keep`.
"""
from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Mapping

from collector.influx import InfluxClient, InfluxConfig, InfluxError
from collector.influx import ensure_database
from collector.influx.server import InfluxServer
from collector.names import check_name
from collector.query.ranges import TimeRange
from collector.query.store import MetricsStore
from engine.config import Config
from engine.formats.log import read_consumed, read_head
from engine.ingress.stats import read_stats
from engine.output.metrics_shipper import run_id_for
from engine.tools.receiver import Receiver
from perf.e2e import ensure_input
from perf.fleet import Fleet, Proc, check_alive, log_tail, remove_quietly, signals_ignored, wait_until
from perf.record import ProgressSample, RunRecord, StepLatency, write_record
from perf.sysinfo import SessionSampler, git_info, machine_info

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
INGRESS_READY_TIMEOUT = 60.0
JOB_READY_TIMEOUT = 240.0          # JVM start, session, first query plan
DRAIN_TIMEOUT = 60.0               # job catching up with the log after the senders stop
JOB_STOP_TIMEOUT = 90.0
SAMPLE_EVERY = 1.0


@dataclass(frozen=True)
class BenchSpec:
    """What one `bench` run is asked to do."""
    rate: int                      # offered events/s over both streams (half NBBO, half orders)
    duration: float                # seconds measured, after the warm-up
    label: str = "bench"
    warmup: float = 10.0           # seconds after the job's first commit before measuring
    symbols: int = 350
    messages: int = 1_000_000      # per generated input file; the senders loop over them
    out: Path | None = None        # JSON file (default <state>/bench-runs/<run>.json)
    keep: bool = False

    def validate(self) -> None:
        """Raise ValueError with a reason for a spec that cannot run."""
        if self.rate <= 0:
            raise ValueError(f"--rate must be positive, got {self.rate}")
        if not 1 <= self.duration <= 24 * 3600:
            raise ValueError(f"--duration must be between 1 s and 24 h, got {self.duration:g}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup:g}")
        check_name(self.label, "--label")        # an InfluxDB tag and part of the run's file name
        if self.symbols < 1 or self.messages < 1000:
            raise ValueError("--symbols must be >= 1 and --messages >= 1000")


def run_id(label: str, now: float | None = None) -> str:
    """Return a fresh run id for a label: `bench-<label as a slug>-<UTC time>`."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40] or "run"
    return f"bench-{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}"


def git_commit(root: Path = ROOT) -> tuple[str | None, bool]:
    """Return (HEAD commit, whether tracked files differ from it); (None, False) outside git."""
    git = git_info(root)
    return git["commit"], git["dirty"]


class _Influx:
    """The InfluxDB a run writes to: `MS_INFLUX_URL`, or the project's server, started if needed.

    `config` is for this process, `config.as_env()` for the run's children.
    """

    def __init__(self, state_dir: Path, influx: InfluxConfig, own_server: bool):
        self.server = None
        self.started = False
        if own_server:
            self.server = InfluxServer(state_dir)
            self.started = not self.server.status().running
            self.server.start()
            # URL and admin credentials; a user's MS_INFLUX_DB stays
            running = self.server.config(db=influx.db)
            influx = replace(influx, url=running.url, db=running.db,
                             **{k: getattr(running, k) for k in ("user", "password", "token")
                                if getattr(running, k) is not None})
        self.config = influx
        self.client = InfluxClient(self.config)
        if not self.client.ping():
            raise RuntimeError(f"InfluxDB at {self.config.url} does not answer (MS_INFLUX_URL)")
        ensure_database(self.client)

    def close(self) -> None:
        self.client.close()
        if self.server is not None and self.started:
            self.server.stop()


def step_latencies(client: InfluxClient, run: str, start_ns: int, end_ns: int) -> list[StepLatency]:
    """Merge each step's histograms of the window from InfluxDB into percentiles."""
    store = MetricsStore(client)
    out = []
    for step in store.steps(run):           # in pipeline order
        h = store.step_histogram(run, step, TimeRange(start_ns, end_ns))
        if not h.total_count:
            continue
        p = h.percentiles((50.0, 90.0, 95.0, 99.0, 99.9))
        out.append(StepLatency(step, int(h.total_count), p[50.0], p[90.0], p[95.0], p[99.0], p[99.9],
                               int(h.max), round(float(h.mean), 1)))
    return out


def progress_samples(raw: list[tuple[int, int, int]]) -> list[ProgressSample]:
    """Turn (wall ns, processed, ingested) readings into per-second rates (pure)."""
    out = []
    for (t0, c0, h0), (t1, c1, h1) in zip(raw, raw[1:]):
        dt = (t1 - t0) / 1e9
        if dt > 0:
            out.append(ProgressSample(t1, c1, h1, round((c1 - c0) / dt, 1), round((h1 - h0) / dt, 1)))
    return out


def window_rates(raw: list[tuple[int, int, int]], start_ns: int) -> tuple[int, float, float]:
    """Return (events processed, processed/s, ingested/s) from the first reading at or after start (pure)."""
    win = [r for r in raw if r[0] >= start_ns]
    if len(win) < 2:
        return 0, 0.0, 0.0
    (t0, c0, h0), (t1, c1, h1) = win[0], win[-1]
    span = (t1 - t0) / 1e9
    return c1 - c0, (c1 - c0) / span, (h1 - h0) / span


def _progress_line(t: float, warmup: float, raw: list[tuple[int, int, int]], samples) -> str:
    (t0, c0, _), (t1, c1, h1) = raw[-6] if len(raw) > 5 else raw[0], raw[-1]
    rate = (c1 - c0) / ((t1 - t0) / 1e9) if t1 > t0 else 0.0
    procs = "  ".join(f"{s.name} {s.cpu_percent:.0f}% {s.rss_bytes / 2**20:,.0f} MiB" for s in samples)
    phase = "warm-up" if t < warmup else "measuring"
    return (f"[{t:5.0f} s {phase:9s}] processed {c1:>11,} ({rate:>9,.0f}/s)  backlog {h1 - c1:>9,}  {procs}")


@dataclass
class _Measured:
    """What driving the fleet produced, before it becomes a RunRecord."""
    started_ns: int
    window_start_ns: int
    window_end_ns: int
    raw: list[tuple[int, int, int]]        # (wall ns, processed, ingested) each second
    processes: list
    commands: dict[str, list[str]]
    results_received: int
    drained: bool


def run_bench(spec: BenchSpec, cfg: Config, influx: InfluxConfig, own_server: bool,
              argv: list[str] | None = None) -> tuple[RunRecord, Path]:
    """Run one performance test; record it; return the record and the JSON file's path.

    Metrics go to `influx` (`MS_INFLUX_*`), or, with `own_server`, to the project's server
    of the state folder, started if needed.
    """

    spec.validate()
    if not cfg.metrics:
        raise ValueError("bench needs the job's latency metrics: drop --no-metrics")
    state_dir = Path(cfg.state_dir).resolve()
    run = run_id(spec.label)
    runs_dir = state_dir / "bench-runs"
    run_dir = runs_dir / run
    if run_dir.exists():
        raise RuntimeError(f"{run_dir} exists already: one bench run per second and label")
    (run_dir / "logs").mkdir(parents=True)
    run_id_for(run_dir, run)               # the ingress and the job tag their metrics with it
    files = ensure_input(state_dir / "bench-data", spec.symbols, spec.messages)
    influx = _Influx(state_dir, influx, own_server)
    try:
        m = _drive(spec, cfg, run, run_dir, files, influx.config.as_env())
        events, eps, ingested_eps = window_rates(m.raw, m.window_start_ns)
        commit, dirty = git_commit()
        plain = lambda d: {k: str(v) if isinstance(v, Path) else v for k, v in d.items()}  # noqa: E731
        rec = RunRecord(
            run=run, label=spec.label, started_ns=m.started_ns, window_start_ns=m.window_start_ns,
            window_end_ns=m.window_end_ns, git_commit=commit, git_dirty=dirty, rate=spec.rate,
            duration_s=spec.duration, warmup_s=spec.warmup,
            command=list(argv) if argv is not None else [Path(sys.argv[0]).name, *sys.argv[1:]],
            commands=m.commands,
            config={"bench": plain(asdict(spec)), "job": plain(asdict(cfg)),
                    "influx": {"url": influx.config.url, "db": influx.config.db},
                    "drained": m.drained, "input": [str(f) for f in files]},
            machine=machine_info(), events=events, throughput_eps=round(eps, 1),
            ingested_eps=round(ingested_eps, 1), results_received=m.results_received,
            steps=step_latencies(influx.client, run, m.window_start_ns, m.window_end_ns),
            progress=progress_samples(m.raw), processes=m.processes)
        path = Path(spec.out) if spec.out else runs_dir / f"{run}.json"
        try:
            write_record(rec, path, influx.client)
        except InfluxError as e:
            print(f"bench: recording to InfluxDB failed ({e}); the JSON file has the run: {path}",
                  file=sys.stderr)
    except (RuntimeError, TimeoutError):
        print(f"bench: the run's logs are kept in {run_dir / 'logs'}", file=sys.stderr)
        raise
    except BaseException:                  # interrupted: nothing worth keeping
        if not spec.keep:
            remove_quietly(run_dir)
        raise
    finally:
        influx.close()
    if not spec.keep:
        remove_quietly(run_dir)
    return rec, path


def _drive(spec: BenchSpec, cfg: Config, run: str, run_dir: Path, files: tuple[Path, Path],
           influx_env: Mapping[str, str]) -> _Measured:
    """Start receiver, ingress, job and senders; sample every second; stop them all."""

    started_ns = time.time_ns()
    fleet = Fleet(run_dir / "logs", cwd=run_dir, env=influx_env)
    receiver = Receiver("127.0.0.1", 0, run_dir / "received.bin").start()
    receiver_port = receiver.port
    log_dir = run_dir / "ingress"
    common = ["--state-dir", run_dir]
    if cfg.fsync is False:
        common.append("--no-fsync")
    try:
        ingress = fleet.spawn("ingress", ["ingress", *common, "--host", "127.0.0.1", "--nbbo-port", 0,
                                          "--orders-port", 0, "--max-backlog", cfg.max_backlog,
                                          "--shards", cfg.shards])

        def ports():
            st = read_stats(log_dir)
            return st["ports"] if st and all(st.get("ports", {}).values()) else None
        ports = wait_until(ports, INGRESS_READY_TIMEOUT, "the ingress to listen", [ingress])
        job = fleet.spawn("job", ["job", *common, "--master", cfg.master, "--shards", cfg.shards,
                                  "--max-rows-per-batch", cfg.max_rows_per_batch, "--trigger-ms", cfg.trigger_ms,
                                  "--forward", f"127.0.0.1:{receiver_port}"])
        print(f"bench {run}: ingress on {ports}, starting the job ...", flush=True)
        wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"),
                   JOB_READY_TIMEOUT, "the job to start its query", fleet.procs, interval=0.5)
        senders = [fleet.spawn(f"send-{stream}", ["send", "--port", ports[stream], "--file", f, "--loop",
                                                   "--rate", spec.rate / 2, "--quiet"])
                   for stream, f in zip(("nbbo", "orders"), files)]
        wait_until(lambda: read_consumed(log_dir) > 0, JOB_READY_TIMEOUT, "the job's first commit", fleet.procs)
        print(f"bench {run}: {spec.rate:,} events/s offered; {spec.warmup:g} s warm-up + "
              f"{spec.duration:g} s measured", flush=True)
        sampler = SessionSampler({"job": job.popen.pid, "ingress": ingress.popen.pid})
        raw: list[tuple[int, int, int]] = []
        t0 = time.monotonic()
        window_start_ns = None
        for k in range(int(round((spec.warmup + spec.duration) / SAMPLE_EVERY)) + 1):
            time.sleep(max(0.0, t0 + k * SAMPLE_EVERY - time.monotonic()))
            check_alive(fleet.procs)
            now = time.time_ns()
            if window_start_ns is None and k * SAMPLE_EVERY >= spec.warmup - 1e-6:
                window_start_ns = now
            raw.append((now, read_consumed(log_dir), read_head(log_dir)))
            new = sampler.sample(now)
            if k and k % 5 == 0:
                print(_progress_line(k * SAMPLE_EVERY, spec.warmup, raw, new), flush=True)
        drained = _stop_input(fleet, senders, ingress, job, log_dir)
        fleet.stop(job, timeout=JOB_STOP_TIMEOUT, leader_only=True)    # ships its last metrics
    except (RuntimeError, TimeoutError):
        for p in fleet.procs:
            if p.name in ("ingress", "job") or not p.alive():
                print(f"--- {p.name} log ends ---\n{log_tail(p.log_path)}", file=sys.stderr)
        raise
    finally:
        with signals_ignored():            # a second Ctrl-C must not leave processes behind
            fleet.stop_all()
            receiver.stop()
    commands = {p.name: list(p.argv) for p in fleet.procs}
    commands["receive"] = ["(in-process) marketspread receive", "--host", "127.0.0.1", "--port",
                           str(receiver_port), "--out", str(receiver.out_path)]
    return _Measured(started_ns, window_start_ns, raw[-1][0], raw, sampler.samples, commands,
                     receiver.count, drained)


def _stop_input(fleet: Fleet, senders: list[Proc], ingress: Proc, job: Proc, log_dir: Path) -> bool:
    """Stop the senders and the ingress; wait (bounded) for the job to commit the whole log."""
    for s in senders:
        fleet.stop(s)
    fleet.stop(ingress, timeout=30.0, leader_only=True)    # it commits and closes its log
    head = read_head(log_dir)
    try:
        wait_until(lambda: read_consumed(log_dir) >= head, DRAIN_TIMEOUT, "the job to drain", [job])
        return True
    except TimeoutError:
        log.warning("the job did not commit the whole log within %.0f s; stopping it anyway", DRAIN_TIMEOUT)
        return False


def summary(rec: RunRecord, path: Path) -> str:
    """Describe a recorded run in a few lines."""
    lines = [f"bench {rec.run} ({rec.label}, commit {(rec.git_commit or '?')[:10]}"
             f"{', dirty' if rec.git_dirty else ''}):",
             f"  machine     {rec.machine.cores} cores, {rec.machine.cpu_model}, "
             f"{rec.machine.mem_total_bytes / 2**30:.1f} GiB",
             f"  throughput  {rec.throughput_eps:,.0f} events/s processed, {rec.ingested_eps:,.0f} ingested "
             f"({rec.rate:,} offered), {rec.results_received:,} results received"]
    for s in rec.steps:
        lines.append(f"  {s.step:<18} p50 {s.p50_ns / 1e6:9.3f} ms  p95 {s.p95_ns / 1e6:9.3f} ms  "
                     f"p99 {s.p99_ns / 1e6:9.3f} ms  max {s.max_ns / 1e6:9.3f} ms  (n={s.count:,})")
    for name in ("job", "ingress"):
        mine = [p for p in rec.processes if p.name == name]
        if mine:
            lines.append(f"  {name:<11} CPU mean {sum(p.cpu_percent for p in mine) / len(mine):.0f} % of a core, "
                         f"RSS max {max(p.rss_bytes for p in mine) / 2**20:,.0f} MiB")
    lines.append(f"  -> {path} and InfluxDB (measurements bench_run, bench_step, bench_progress, process)")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the `bench` command's own flags."""
    p.add_argument("--rate", type=int, default=50_000, help="offered events/s over both streams (default 50000)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds measured after the warm-up (default 60)")
    p.add_argument("--label", default="bench", help="name of this run in comparisons (default bench)")
    p.add_argument("--warmup", type=float, default=10.0,
                   help="seconds after the first commit before measuring (10)")
    p.add_argument("--symbols", type=int, default=350)
    p.add_argument("--messages", type=int, default=1_000_000, help="messages per generated input file (1000000)")
    p.add_argument("--out", type=Path, help="JSON file (default <state>/bench-runs/<run>.json)")
    p.add_argument("--keep", action="store_true", help="keep the run's state folder (log, checkpoint, results)")


def _raise_interrupt(*_):
    raise KeyboardInterrupt


def run_cli(args: argparse.Namespace, cfg: Config, influx: InfluxConfig, own_server: bool) -> int:
    """Run `marketspread bench`: one run, its summary printed (settings: the CLI read them)."""
    spec = BenchSpec(rate=args.rate, duration=args.duration, label=args.label, warmup=args.warmup,
                     symbols=args.symbols, messages=args.messages, out=args.out, keep=args.keep)
    spec.validate()
    signal.signal(signal.SIGTERM, _raise_interrupt)
    rec, path = run_bench(spec, cfg, influx, own_server, list(sys.orig_argv))
    print(summary(rec, path), flush=True)
    return 0
