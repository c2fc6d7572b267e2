"""The whole path of the Market Spread job, run and measured: senders -> TCP ingress -> Spark -> result files.

The library of the whole-path benchmarks (bench/e2e.py and those built on it) and of the
reliability tests: generate the looping input, start the processes a user runs
(`marketspread ingress`, `marketspread job`, `marketspread send`, each leading a session
of its own: perf/fleet.py), sample the job's committed offset every second, and turn the
samples and the files a run left into figures (throughput, latency to written and to
committed, batch cadence, exactness: perf/exactness.py). `marketspread bench`
(perf/perftest.py) shares its input generation.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from collector.safe_delete import remove_tree
from engine.config import Config
from engine.formats.log import read_consumed, read_head
from engine.ingress.stats import read_stats
from engine.formats.batch import read_batch, read_committed
from engine.tools.generate import generate
from perf.exactness import ExactnessFigures, check_exactness
from perf.fleet import Fleet, Proc, check_alive, log_tail, remove_quietly, signals_ignored, wait_until
from perf.sysinfo import SessionSampler

DATA_MESSAGES = 1_000_000          # per generated file; senders loop over them
DATA_SEED = 1
SAMPLE_EVERY = 1.0                 # seconds between samples of `consumed`
WINDOW = 5                         # samples per window of the median figure
PROGRESS_EVERY = 5                 # samples between progress lines
INGRESS_READY_TIMEOUT = 60.0
JOB_READY_TIMEOUT = 240.0          # JVM start, session, first query plan
DRAIN_TIMEOUT = 300.0              # job catching up with the log after the senders stop
JOB_STOP_TIMEOUT = 90.0


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class BenchConfig:
    """What one mode's run was asked to do."""
    mode: str                          # "throughput" or "latency"
    duration: float                    # seconds measured, after the warm-up
    warmup: float
    rate: int | None                   # offered events/s over both streams; None = unthrottled
    symbols: int
    wide_share: float
    master: str
    shards: int
    max_rows_per_batch: int | None     # None: the job's default
    max_backlog: int
    state_dir: str


@dataclass(frozen=True)
class StartupFigures:
    """Seconds each step of the start took; the warm-up begins after the first commit."""
    ingress_ready_s: float             # spawn -> listening
    job_ready_s: float                 # spawn -> query started (JVM, session, plan)
    first_commit_s: float              # senders started -> first batch committed


@dataclass(frozen=True)
class Sample:
    """One look at the run, taken every second from the job's first commit on."""
    t: float                           # seconds since the job's first commit
    wall_ns: int
    consumed: int
    head: int
    muted: bool
    muted_seconds: float
    mute_episodes: int


@dataclass(frozen=True)
class ThroughputFigures:
    """Processed (committed by the job) and ingested events/s over the measurement window."""
    window_s: float
    processed_mean: float              # events/s, whole window
    processed_median_5s: float         # median of back-to-back 5-s windows
    processed_5s: list[float]
    processed_1s: list[float]
    ingested_mean: float
    backlog_end: int                   # records in the log not yet committed, at window end
    muted_share: float                 # share of 1-s samples with the ingress muted
    mute_episodes: int                 # in the window
    muted_seconds: float               # in the window


@dataclass(frozen=True)
class LatencyFigures:
    """Latency of the results of orders ingested in the measurement window, in ms."""
    basis: str                         # "written": result timestamp; "committed": Spark commit time
    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


@dataclass(frozen=True)
class CadenceFigures:
    """Committed micro-batches in the measurement window."""
    batches: int
    batches_per_s: float
    gap_median_ms: float
    gap_p90_ms: float
    gap_max_ms: float
    records_per_batch_median: float | None


@dataclass(frozen=True)
class ModeResult:
    """Everything one mode measured."""
    config: BenchConfig
    startup: StartupFigures
    throughput: ThroughputFigures
    latency_written: LatencyFigures | None
    latency_committed: LatencyFigures | None
    cadence: CadenceFigures | None
    exactness: ExactnessFigures
    samples: list[Sample] = field(repr=False)
    cpu: dict[str, float] = field(default_factory=dict)     # % of one core per process, measured window


# --------------------------------------------------------------------------- set-up

def ensure_input(data_dir: Path, symbols: int, messages: int = DATA_MESSAGES,
                 wide_share: float = 0.1) -> tuple[Path, Path]:
    """Generate the looping input once per folder; return (NBBO file, orders file)."""
    tag = f"{symbols}sym-{wide_share:g}wide-{messages}"
    nbbo, orders = data_dir / f"nbbo-{tag}.msg", data_dir / f"orders-{tag}.msg"
    if not (nbbo.exists() and orders.exists()):
        print(f"generating input in {data_dir} ...", flush=True)
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp_n, tmp_o = nbbo.with_suffix(".tmp"), orders.with_suffix(".tmp")
        generate(tmp_n, tmp_o, symbols=symbols, nbbo=messages, orders=messages,
                 wide_share=wide_share, seed=DATA_SEED)
        tmp_n.replace(nbbo)
        tmp_o.replace(orders)
    return nbbo, orders


def start_ingress(fleet: Fleet, run_dir: Path, cfg: BenchConfig,
                  extra_args: Sequence[str] = ()) -> tuple[Proc, dict[str, int]]:
    """Start the ingress on free ports; return it and its ports once it listens."""
    ingress = fleet.spawn("ingress", ["ingress", "--state-dir", run_dir, "--nbbo-port", 0,
                                      "--orders-port", 0, "--max-backlog", cfg.max_backlog,
                                      "--shards", cfg.shards, *extra_args])

    def ports():
        st = read_stats(run_dir / "ingress")
        return st["ports"] if st and all(st.get("ports", {}).values()) else None
    return ingress, wait_until(ports, INGRESS_READY_TIMEOUT, "the ingress to listen", [ingress])


def start_job(fleet: Fleet, run_dir: Path, cfg: BenchConfig, extra_args: Sequence[str] = ()) -> Proc:
    """Start the Spark job; return once its query runs."""
    # --keep-log: the exactness check reads the whole log after the run (retention would
    # delete the committed segments; tests/reliability/test_retention.py checks with it on).
    args = ["job", "--state-dir", run_dir, "--master", cfg.master, "--shards", cfg.shards, "--keep-log"]
    if cfg.max_rows_per_batch:
        args += ["--max-rows-per-batch", cfg.max_rows_per_batch]
    job = fleet.spawn("job", [*args, *extra_args])
    wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"),
               JOB_READY_TIMEOUT, "the job to start its query", fleet.procs, interval=0.5)
    return job


def start_senders(fleet: Fleet, ports: dict[str, int], files: dict[str, Path],
                  rate: int | None) -> list[Proc]:
    """Start one looping sender per stream; `rate` is split evenly across the two."""
    senders = []
    for stream in ("nbbo", "orders"):
        args = ["send", "--port", ports[stream], "--file", files[stream], "--loop"]
        if rate:
            args += ["--rate", rate / 2]
        senders.append(fleet.spawn(f"send-{stream}", args))
    return senders


# --------------------------------------------------------------------------- measuring

def take_sample(log_dir: Path, t: float) -> Sample:
    """Read the log counters and the ingress stats."""
    st = read_stats(log_dir) or {}
    return Sample(round(t, 3), time.time_ns(), read_consumed(log_dir), read_head(log_dir),
                  bool(st.get("muted")), float(st.get("muted_seconds", 0.0)), int(st.get("mute_episodes", 0)))


def sample_run(log_dir: Path, seconds: float, warmup: float, watch: list[Proc],
               cpu: SessionSampler | None = None) -> list[Sample]:
    """Sample every second for `seconds`, on a fixed schedule; print progress lines.

    `cpu`, if given, is sampled when the warm-up ends and at the end: its last samples are
    each process's CPU use over the measured window.
    """
    t0 = time.monotonic()
    samples: list[Sample] = []
    n = int(round(seconds / SAMPLE_EVERY))
    window_started = False
    for k in range(n + 1):
        time.sleep(max(0.0, t0 + k * SAMPLE_EVERY - time.monotonic()))
        check_alive(watch)
        s = take_sample(log_dir, time.monotonic() - t0)
        samples.append(s)
        if cpu is not None and (k == n or (s.t >= warmup - 1e-6 and not window_started)):
            cpu.sample(s.wall_ns)
            window_started = True
        if k and k % PROGRESS_EVERY == 0:
            prev = samples[k - PROGRESS_EVERY]
            rate = (s.consumed - prev.consumed) / (s.t - prev.t)
            phase = "warm-up" if s.t <= warmup + 1e-6 else "measuring"
            print(f"[{s.t:5.0f} s {phase:9s}] processed {s.consumed:>12,} ({rate:>10,.0f}/s)  "
                  f"ingested {s.head:>12,}  backlog {s.head - s.consumed:>10,}"
                  f"{'  MUTED' if s.muted else ''}", flush=True)
    return samples


def throughput_figures(samples: list[Sample], warmup: float) -> ThroughputFigures:
    """Rates over the samples after the warm-up (pure arithmetic)."""
    win = [s for s in samples if s.t >= warmup - 1e-6]
    first, last = win[0], win[-1]
    span = last.t - first.t
    per_s = [(b.consumed - a.consumed) / (b.t - a.t) for a, b in zip(win, win[1:])]
    per_5s = [(win[i + WINDOW].consumed - win[i].consumed) / (win[i + WINDOW].t - win[i].t)
              for i in range(0, len(win) - WINDOW, WINDOW)]
    return ThroughputFigures(
        window_s=round(span, 3),
        processed_mean=(last.consumed - first.consumed) / span,
        processed_median_5s=float(np.median(per_5s)) if per_5s else float("nan"),
        processed_5s=[round(r, 1) for r in per_5s],
        processed_1s=[round(r, 1) for r in per_s],
        ingested_mean=(last.head - first.head) / span,
        backlog_end=last.head - last.consumed,
        muted_share=sum(s.muted for s in win) / len(win),
        mute_episodes=last.mute_episodes - first.mute_episodes,
        muted_seconds=round(last.muted_seconds - first.muted_seconds, 3))


def latency_figures(basis: str, latency_ns: np.ndarray) -> LatencyFigures | None:
    """Percentiles of latencies given in ns, reported in ms."""
    if len(latency_ns) == 0:
        return None
    q = np.percentile(latency_ns, [50, 90, 99, 99.9], method="higher") / 1e6
    return LatencyFigures(basis, len(latency_ns), *(round(float(v), 3) for v in q),
                          round(float(latency_ns.max()) / 1e6, 3))


class CommitWatcher:
    """Record every batch's commit time and end offset while the job runs.

    Spark's commit log entry (`checkpoint/commits/<id>`, written once all of the batch's
    tasks have written their results) is when a batch's results become visible; its
    mtime is the commit time. The offset log entry (`offsets/<id>`) is written when the
    batch is planned, before it runs: from it to the commit is the batch's duration, read
    the same whether the job's metrics are on or off. Spark keeps only its last 100 commit
    and offset log entries, fewer than a run makes, so a thread reads them as they appear
    (every 20 ms) and `stop` saves them to `<run>/batches.json`.
    """

    def __init__(self, run_dir: Path, every: float = 0.02):
        self.run_dir = run_dir
        self.cp = run_dir / "checkpoint"
        self.every = every
        self.batches: dict[int, tuple[int, int, int]] = {}  # id -> (commit ns, end seq, planned ns)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-watcher", daemon=True)

    def start(self) -> "CommitWatcher":
        self._thread.start()
        return self

    def scan(self) -> None:
        try:
            names = os.listdir(self.cp / "commits")
        except FileNotFoundError:
            return
        for n in names:
            if not n.isdigit() or int(n) in self.batches:
                continue
            try:
                t = os.stat(self.cp / "commits" / n).st_mtime_ns
                planned = os.stat(self.cp / "offsets" / n).st_mtime_ns
                end = int(json.loads((self.cp / "offsets" / n).read_text().strip().splitlines()[-1])["seq"])
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                continue                                    # purged meanwhile: next scan skips it
            self.batches[int(n)] = (t, end, planned)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.scan()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.scan()
        (self.run_dir / "batches.json").write_text(json.dumps(
            {str(k): list(v) for k, v in sorted(self.batches.items())}))


def read_batches(run_dir: Path) -> dict[int, tuple[int, int]]:
    """What a CommitWatcher saved: batch id -> (commit ns, end seq)."""
    path = run_dir / "batches.json"
    if not path.exists():
        return {}
    return {int(k): (int(v[0]), int(v[1])) for k, v in json.loads(path.read_text()).items()}


def batch_times(run_dir: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (batch ids, commit ns, result count) of the committed batches seen, in order."""
    seen = read_batches(run_dir)
    ids = sorted(seen)
    counts = [read_batch(run_dir / "results", b).count for b in ids]
    return (np.array(ids, np.int64), np.array([seen[b][0] for b in ids], np.int64),
            np.array(counts, np.int64))


def batch_durations_ms(run_dir: Path, start_ns: int, end_ns: int) -> np.ndarray:
    """Return the duration (offset log to commit log, ms) of each batch committed in [start_ns, end_ns]."""
    path = run_dir / "batches.json"
    seen = json.loads(path.read_text()) if path.exists() else {}
    return np.array([(int(v[0]) - int(v[2])) / 1e6 for v in seen.values()
                     if len(v) > 2 and start_ns <= int(v[0]) <= end_ns], np.float64)


def batch_end_offsets(run_dir: Path) -> dict[int, int]:
    """Return each committed batch's end seq (Spark's offset log, as the watcher saw it)."""
    return {b: end for b, (_, end) in read_batches(run_dir).items()}


def cadence_figures(ids: np.ndarray, times: np.ndarray, ends: dict[int, int],
                    start_ns: int, end_ns: int) -> CadenceFigures | None:
    """Batches committed in [start_ns, end_ns]: rate, gaps between commits, records per batch."""
    sel = (times >= start_ns) & (times <= end_ns)
    if sel.sum() < 2:
        return None
    t = np.sort(times[sel])
    gaps = np.diff(t) / 1e6
    sizes = [ends[b] - ends.get(b - 1, 0) for b in ids[sel].tolist()
             if b in ends and (b == 0 or b - 1 in ends)]
    return CadenceFigures(int(sel.sum()), round(float(sel.sum()) / ((end_ns - start_ns) / 1e9), 3),
                          round(float(np.median(gaps)), 1), round(float(np.percentile(gaps, 90)), 1),
                          round(float(gaps.max()), 1), float(np.median(sizes)) if sizes else None)


# --------------------------------------------------------------------------- one mode

@dataclass(frozen=True)
class RecordedRun:
    """A run's processes stopped and its files on disk, before the figures (and the exactness
    check, the longest part of a throughput run) are taken from them: `mode_result`."""
    config: BenchConfig
    startup: StartupFigures
    run_dir: Path
    samples: list[Sample] = field(repr=False)
    drain_s: float
    cpu: dict[str, float]              # % of one core per process, measured window


def run_mode(cfg: BenchConfig, files: dict[str, Path], run_dir: Path, *, extra_args: Sequence[str] = (),
             env: Mapping[str, str] | None = None) -> ModeResult:
    """Start ingress, job and senders; measure; stop everything; compute the figures.

    `extra_args` go on the ingress's and the job's command lines (e.g. `--no-metrics`),
    `env` into every process's environment (e.g. `MS_INFLUX_URL`).
    """
    return mode_result(record_mode(cfg, files, run_dir, extra_args=extra_args, env=env))


def record_mode(cfg: BenchConfig, files: dict[str, Path], run_dir: Path, *, extra_args: Sequence[str] = (),
                env: Mapping[str, str] | None = None) -> RecordedRun:
    """`run_mode` up to its figures: the run measured and its processes stopped, its files kept."""
    remove_tree(run_dir)
    (run_dir / "logs").mkdir(parents=True)
    fleet = Fleet(run_dir / "logs", cwd=run_dir, env=env)
    log_dir = run_dir / "ingress"
    try:
        t0 = time.monotonic()
        ingress, ports = start_ingress(fleet, run_dir, cfg, extra_args)
        t1 = time.monotonic()
        job = start_job(fleet, run_dir, cfg, extra_args)
        t2 = time.monotonic()
        offered = f"{cfg.rate:,} events/s" if cfg.rate else "unthrottled"
        print(f"e2e {cfg.mode}: ingress on {ports}, job ready in {t2 - t1:.1f} s; senders {offered}; "
              f"{cfg.warmup:g} s warm-up (after the first commit) + {cfg.duration:g} s measured", flush=True)
        watcher = CommitWatcher(run_dir).start()
        senders = start_senders(fleet, ports, files, cfg.rate)
        wait_until(lambda: read_consumed(log_dir) > 0, JOB_READY_TIMEOUT, "the job's first commit",
                   fleet.procs)
        startup = StartupFigures(round(t1 - t0, 3), round(t2 - t1, 3), round(time.monotonic() - t2, 3))
        cpu = SessionSampler({p.name: p.popen.pid for p in fleet.procs})
        samples = sample_run(log_dir, cfg.warmup + cfg.duration, cfg.warmup, fleet.procs, cpu)
        drain_s = stop_input_and_drain(fleet, senders, ingress, job, log_dir)
        watcher.stop()
        fleet.stop(job, timeout=JOB_STOP_TIMEOUT, leader_only=True)
    except (RuntimeError, TimeoutError):
        for p in fleet.procs:              # --keep keeps the whole logs
            if p.name in ("ingress", "job") or not p.alive():
                print(f"--- {p.name} log ends ---\n{log_tail(p.log_path)}", file=sys.stderr)
        raise
    finally:
        with signals_ignored():            # a second Ctrl-C must not leave processes behind
            fleet.stop_all()
    return RecordedRun(cfg, startup, run_dir, samples, drain_s, {c.name: c.cpu_percent for c in cpu.samples})


def mode_result(rec: RecordedRun) -> ModeResult:
    """A recorded run's figures, its results checked for exactness."""
    res = figures_of(rec.config, rec.startup, rec.run_dir, rec.samples, rec.drain_s)
    return replace(res, cpu=rec.cpu)


def stop_input_and_drain(fleet: Fleet, senders: list[Proc], ingress: Proc, job: Proc, log_dir: Path) -> float:
    """Stop the senders and the ingress, wait for the job to commit the whole log; return seconds."""
    for s in senders:
        fleet.stop(s)
    fleet.stop(ingress, timeout=30.0, leader_only=True)    # it commits and closes its log
    t0 = time.monotonic()
    head = read_head(log_dir)
    wait_until(lambda: read_consumed(log_dir) >= head, DRAIN_TIMEOUT,
               f"the job to commit the whole log ({head:,} records)", [job])
    return time.monotonic() - t0


def figures_of(cfg: BenchConfig, startup: StartupFigures, run_dir: Path, samples: list[Sample],
               drain_s: float) -> ModeResult:
    """Turn the samples and the files the run left into figures."""
    win_start = next(s for s in samples if s.t >= cfg.warmup - 1e-6).wall_ns
    win_end = samples[-1].wall_ns
    frames, side = read_committed(run_dir / "results")
    ids, commit_ns, counts = batch_times(run_dir)
    in_window = (side[:, 1] >= win_start) & (side[:, 1] <= win_end)
    written = frames["timestamp"].astype(np.int64) - side[:, 1]
    lat_written = latency_figures("written", written[in_window])
    lat_committed = None
    if counts.sum() == len(frames):       # every batch's commit seen: they line up batch by batch
        committed = np.repeat(commit_ns, counts) - side[:, 1]
        lat_committed = latency_figures("committed", committed[in_window])
    cadence = cadence_figures(ids, commit_ns, batch_end_offsets(run_dir), win_start, win_end)
    return ModeResult(cfg, startup, throughput_figures(samples, cfg.warmup), lat_written, lat_committed,
                      cadence, check_exactness(run_dir, frames, side, drain_s), samples)


# --------------------------------------------------------------------------- command line

def mode_configs(args: argparse.Namespace, state_dir: Path) -> list[BenchConfig]:
    """Return the configs of the modes to run, in order."""
    def warmup(default: float) -> float:
        return args.warmup if args.warmup is not None else default
    tp = BenchConfig(mode="throughput", duration=args.duration, warmup=warmup(20.0), rate=None,
                     symbols=args.symbols, wide_share=args.wide_share, master=args.master,
                     shards=args.shards, max_rows_per_batch=args.max_rows_per_batch,
                     max_backlog=args.max_backlog, state_dir=str(state_dir))
    lat = replace(tp, mode="latency", rate=args.rate, warmup=warmup(15.0))
    return {"throughput": [tp], "latency": [lat], "all": [tp, lat]}[args.mode]


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """Add the input, job and ingress flags every whole-path benchmark shares."""
    p.add_argument("--rate", type=int, default=50_000,
                   help="latency mode: offered events/s, split evenly over NBBO and orders (50000)")
    p.add_argument("--symbols", type=int, default=350)
    p.add_argument("--wide-share", type=float, default=0.1)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--shards", type=int, default=Config().shards, help=f"(the job's default, {Config().shards})")
    p.add_argument("--max-rows-per-batch", type=int, help="job's largest micro-batch (default: the job's)")
    p.add_argument("--max-backlog", type=int, default=1_000_000,
                   help="records behind the job before the ingress mutes (1000000)")


def raise_interrupt(*_):
    """Turn SIGTERM into KeyboardInterrupt, so a stopped benchmark stops its processes too."""
    raise KeyboardInterrupt


def cleanup(state_dir: Path, temp: bool, keep: bool) -> None:
    """Delete the run folders (all of a temp state dir; a given one keeps its input data)."""
    if keep:
        print(f"e2e: state kept in {state_dir}", file=sys.stderr)
    elif temp:
        remove_quietly(state_dir)
    else:
        for run_dir in state_dir.glob("run-*"):
            remove_quietly(run_dir)

