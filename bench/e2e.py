"""Whole-path benchmark of the Market Spread job: senders -> TCP ingress -> Spark -> result files.

It runs the processes a user runs (`marketspread ingress`, `marketspread job`,
`marketspread send`), each in a session of its own, on generated input that loops.

    python bench/e2e.py throughput [--duration 60] [--warmup 20]   # unthrottled senders
    python bench/e2e.py latency --rate 50000 [--duration 60]       # offered load, events/s
    python bench/e2e.py all [--duration 60]                        # both, latency at --rate

Throughput samples the job's committed offset (`consumed`) every second; latency takes
the results of orders that arrived in the measurement window (result timestamp, or
batch commit time, minus ingest time). Afterwards every run checks the committed
results against a plain-Python reference of the rule over the whole ingress log in
arrival order. Figures are printed and written to `bench/results/`; a benchmark never
fails on a timing (exit 0 even when a figure is poor; 1 if the run itself broke).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.config import Config  # noqa: E402
from engine.wire.fixish import NBBO_FIELDS, NBBO_TYPE, ORDER_FIELDS, ORDER_TYPE, Nbbo, Order  # noqa: E402
from perf.fleet import Fleet, Proc, check_alive, log_tail, session_members, signals_ignored, wait_until  # noqa: E402,F401
from engine.ingress.stats import read_stats  # noqa: E402
from engine.formats.log import PAYLOAD_OFFSET, LogReader, read_consumed, read_head  # noqa: E402
from engine.formats.batch import read_batch, read_committed  # noqa: E402
from engine.rule import reference_results  # noqa: E402
from perf.sysinfo import SessionSampler  # noqa: E402
from engine.tools.generate import generate  # noqa: E402

RESULTS_DIR = ROOT / "bench" / "results"
DATA_MESSAGES = 1_000_000          # per generated file; senders loop over them
DATA_SEED = 1
SAMPLE_EVERY = 1.0                 # seconds between samples of `consumed`
WINDOW = 5                         # samples per window of the median figure
PROGRESS_EVERY = 5                 # samples between progress lines
INGRESS_READY_TIMEOUT = 60.0
JOB_READY_TIMEOUT = 240.0          # JVM start, session, first query plan
DRAIN_TIMEOUT = 300.0              # job catching up with the log after the senders stop
JOB_STOP_TIMEOUT = 90.0
REFERENCE_CHUNK = 1 << 20          # log records decoded per step of the reference

# Where the fields of a log record are: ingest ns, then the payload as received.
# (`key` is the symbol's 4 bytes read as one number: a cheap dict key.)
_NBBO_REC = np.dtype({"names": ["type", "key", "bid", "offer"],
                      "formats": ["u1", ">u4", ">f8", ">f8"],
                      "offsets": [PAYLOAD_OFFSET + o for o in (0, NBBO_FIELDS["symbol"], NBBO_FIELDS["bid"],
                                                                NBBO_FIELDS["offer"])],
                      "itemsize": 64})
_ORDER_REC = np.dtype({"names": ["side", "account", "order_id", "symbol", "key", "qty", "price"],
                       "formats": ["u1", ">u4", ("u1", (6,)), ("u1", (4,)), ">u4", ">f8", ">f8"],
                       "offsets": [PAYLOAD_OFFSET + ORDER_FIELDS[f] for f in
                                   ("side", "account", "order_id", "symbol", "symbol", "qty", "price")],
                       "itemsize": 64})
RESULT_FIELDS = ("side", "account", "order_id", "symbol", "qty", "price", "bid", "offer")


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
class ExactnessFigures:
    """Committed results against the reference rule over the whole ingress log."""
    exact: bool                        # same tuples in seq order, same seqs, no seq twice
    events: int                        # log records checked (the whole log)
    nbbo: int
    orders: int
    expected: int
    committed: int
    duplicate_seqs: int
    seqs_match: bool
    mismatched_rows: int               # rows whose tuple differs (when the counts agree)
    first_difference: str | None
    head: int
    consumed: int
    bad_frames: int                    # set aside by the ingress (a killed sender cuts a frame)
    drain_s: float                     # senders stopped -> job committed the whole log
    reference_s: float


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


# --------------------------------------------------------------------------- processes
# (perf/fleet.py: shared with `marketspread bench`)

# --------------------------------------------------------------------------- set-up

def ensure_data(data_dir: Path, symbols: int, wide_share: float) -> tuple[Path, Path]:
    """Generate the looping input once per state dir; return (nbbo file, orders file)."""
    tag = f"{symbols}sym-{wide_share:g}wide-{DATA_MESSAGES}"
    nbbo, orders = data_dir / f"nbbo-{tag}.msg", data_dir / f"orders-{tag}.msg"
    if not (nbbo.exists() and orders.exists()):
        print(f"e2e: generating input in {data_dir} ...", flush=True)
        tmp_n, tmp_o = nbbo.with_suffix(".tmp"), orders.with_suffix(".tmp")
        generate(tmp_n, tmp_o, symbols=symbols, nbbo=DATA_MESSAGES, orders=DATA_MESSAGES,
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
    mtime is the commit time. Spark keeps only its last 100 commit and offset log
    entries, fewer than a run makes, so a thread reads them as they appear (every
    20 ms) and `stop` saves them to `<run>/batches.json`.
    """

    def __init__(self, run_dir: Path, every: float = 0.02):
        self.run_dir = run_dir
        self.cp = run_dir / "checkpoint"
        self.every = every
        self.batches: dict[int, tuple[int, int]] = {}      # id -> (commit ns, end seq)
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
                end = int(json.loads((self.cp / "offsets" / n).read_text().strip().splitlines()[-1])["seq"])
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                continue                                    # purged meanwhile: next scan skips it
            self.batches[int(n)] = (t, end)

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


# --------------------------------------------------------------------------- exactness

class ReferenceRule:
    """engine/rule.py's `reference_results`, fed log records in arrival order, chunk by chunk.

    Its state carries over between chunks, so a reader can follow a live log (and let
    retention delete what it has read: tests/reliability/test_retention.py): each chunk
    goes to the rule after every symbol's last quote so far, which sets that state again.
    """

    def __init__(self):
        self.last_quote: dict[int, Nbbo] = {}
        self.parts: list[dict[str, np.ndarray]] = []
        self.n_nbbo = self.n_orders = 0

    def feed(self, start: int, rec: np.ndarray) -> None:
        """Run the rule over records `rec` (seq `start` on); keep their expected results."""
        nbbo, order = rec.view(_NBBO_REC).reshape(-1), rec.view(_ORDER_REC).reshape(-1)
        kinds, nbbo_sym, order_sym = nbbo["type"].tolist(), nbbo["key"].tolist(), order["key"].tolist()
        bids, offers = nbbo["bid"].tolist(), nbbo["offer"].tolist()
        n_nbbo, n_orders = kinds.count(NBBO_TYPE), kinds.count(ORDER_TYPE)
        if n_nbbo + n_orders != len(kinds):
            bad = next(i for i, k in enumerate(kinds) if k != NBBO_TYPE and k != ORDER_TYPE)
            raise ValueError(f"log record {start + bad} has message type {kinds[bad]}")
        # A symbol is its 4 bytes as one number; an order's id is its row, so each result
        # names the record it came from (whose own fields the results then take). The
        # records become tuples directly (tuple.__new__: a third of the NamedTuple call).
        make = tuple.__new__
        messages: list[Nbbo | Order] = list(self.last_quote.values())
        messages += [make(Nbbo, (nbbo_sym[i], b"", bids[i], offers[i])) if kind == NBBO_TYPE else
                     make(Order, (0, 0, i, order_sym[i], 0.0, 0.0, b"")) for i, kind in enumerate(kinds)]
        for m in messages[len(messages) - len(kinds):]:
            if type(m) is Nbbo:
                self.last_quote[m.symbol] = m
        self.n_nbbo += n_nbbo
        self.n_orders += n_orders
        results = reference_results(messages)
        rows = np.array([r[2] for r in results], np.int64)
        sel = order[rows]
        part = {f: sel[f] for f in ("side", "account", "order_id", "symbol", "qty", "price")}
        part["seq"] = start + rows
        part["bid"] = np.array([r[6] for r in results], np.float64)
        part["offer"] = np.array([r[7] for r in results], np.float64)
        self.parts.append(part)

    def expected(self) -> dict[str, np.ndarray]:
        """The expected results so far, as columns (seq and RESULT_FIELDS)."""
        if not self.parts:
            return {f: np.empty(0) for f in ("seq", *RESULT_FIELDS)}
        return {f: np.concatenate([p[f] for p in self.parts]) for f in self.parts[0]}


def reference_expected(log_dir: Path, head: int) -> tuple[dict[str, np.ndarray], int, int]:
    """Run the rule in plain Python over log records [0, head) in arrival order.

    Returns the expected results as columns (seq and RESULT_FIELDS), plus the NBBO and
    order counts.
    """
    reader = LogReader(log_dir)
    ref = ReferenceRule()
    for start in range(0, head, REFERENCE_CHUNK):
        ref.feed(start, reader.read(start, min(head, start + REFERENCE_CHUNK)))
    return ref.expected(), ref.n_nbbo, ref.n_orders


def compare_results(expected: dict[str, np.ndarray], frames: np.ndarray,
                    side: np.ndarray) -> tuple[bool, int, bool, int, str | None]:
    """Compare committed results, sorted by seq, with the expected ones.

    Returns (tuples equal, duplicate seqs, seqs equal, mismatched rows, first difference).
    """
    order = np.argsort(side[:, 0], kind="stable")
    got, seq = frames[order], side[order, 0]
    duplicates = int(len(seq) - len(np.unique(seq)))
    exp_seq = expected["seq"]
    if len(got) != len(exp_seq):
        missing = np.setdiff1d(exp_seq, seq)
        extra = np.setdiff1d(seq, exp_seq)
        first = (f"{len(got)} committed vs {len(exp_seq)} expected; {len(missing)} expected seqs missing "
                 f"(first {missing[:3].tolist()}), {len(extra)} unexpected (first {extra[:3].tolist()})")
        return False, duplicates, False, -1, first
    differs = np.zeros(len(got), bool)
    for f in RESULT_FIELDS:
        a, b = got[f], expected[f]
        differs |= (a != b).reshape(len(got), -1).any(axis=1)
    bad = np.flatnonzero(differs)
    seqs_match = bool(np.array_equal(seq, exp_seq))
    first = None
    if len(bad):
        i = int(bad[0])
        first = (f"row {i} (seq {int(seq[i])}): got {[_plain(got[f][i]) for f in RESULT_FIELDS]}, "
                 f"expected {[_plain(expected[f][i]) for f in RESULT_FIELDS]}")
    elif not seqs_match:
        i = int(np.flatnonzero(seq != exp_seq)[0])
        first = f"row {i}: seq {int(seq[i])} committed, {int(exp_seq[i])} expected"
    return len(bad) == 0, duplicates, seqs_match, len(bad), first


def _plain(v):
    return bytes(v).decode("latin-1") if np.ndim(v) else v.item()


def check_exactness(run_dir: Path, frames: np.ndarray, side: np.ndarray, drain_s: float) -> ExactnessFigures:
    """Check the committed results against the reference over the whole ingress log."""
    log_dir = run_dir / "ingress"
    head, consumed = read_head(log_dir), read_consumed(log_dir)
    t0 = time.monotonic()
    print(f"e2e: checking {head:,} logged events against the reference ...", flush=True)
    expected, n_nbbo, n_orders = reference_expected(log_dir, head)
    equal, dups, seqs_match, mismatched, first = compare_results(expected, frames, side)
    st = read_stats(log_dir) or {}
    if consumed != head:
        first = f"the job committed {consumed:,} of {head:,} logged records; {first}"
    return ExactnessFigures(
        exact=equal and dups == 0 and seqs_match and consumed == head,
        events=head, nbbo=n_nbbo, orders=n_orders, expected=len(expected["seq"]), committed=len(frames),
        duplicate_seqs=dups, seqs_match=seqs_match, mismatched_rows=mismatched,
        first_difference=first,
        head=head, consumed=consumed, bad_frames=int(st.get("bad_total", 0)),
        drain_s=round(drain_s, 3), reference_s=round(time.monotonic() - t0, 3))


# --------------------------------------------------------------------------- one mode

def run_mode(cfg: BenchConfig, files: dict[str, Path], run_dir: Path, *, extra_args: Sequence[str] = (),
             env: Mapping[str, str] | None = None) -> ModeResult:
    """Start ingress, job and senders; measure; stop everything; compute the figures.

    `extra_args` go on the ingress's and the job's command lines (e.g. `--no-metrics`),
    `env` into every process's environment (e.g. `MS_INFLUX_URL`).
    """
    if run_dir.exists():
        shutil.rmtree(run_dir)
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
    res = figures_of(cfg, startup, run_dir, samples, drain_s)
    return replace(res, cpu={c.name: c.cpu_percent for c in cpu.samples})


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


# --------------------------------------------------------------------------- report

def machine_info() -> dict:
    """Describe the machine and the code the figures came from."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    mem_kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                  if ln.startswith("MemTotal"))
    return {"nproc": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)), "cpu_model": cpu,
            "mem_total_gib": round(mem_kb / 2**20, 1), "loadavg_at_start": list(os.getloadavg()),
            "python": platform.python_version(), "pyspark": _version("pyspark"),
            "kernel": platform.release()}


def git_info() -> dict:
    """Return the commit and whether the work tree had changes."""
    def git(*args):
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return r.stdout.rstrip("\n") if r.returncode == 0 else None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(status),
            "changed": status.splitlines() if status else []}


def _version(pkg: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


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


def write_json(res: ModeResult, machine: dict, git: dict, argv: list[str]) -> Path:
    """Write a mode's figures, config, machine and commit to bench/results/."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"e2e-{res.config.mode}-{stamp}.json"
    doc = {"benchmark": "e2e", "mode": res.config.mode, "utc": stamp,
           "command": shlex.join([sys.executable, *argv]), "git": git,
           "machine": dict(machine, loadavg_at_end=list(os.getloadavg())),
           "config": asdict(res.config), "startup": asdict(res.startup),
           "throughput": asdict(res.throughput),
           "latency_written": res.latency_written and asdict(res.latency_written),
           "latency_committed": res.latency_committed and asdict(res.latency_committed),
           "cadence": res.cadence and asdict(res.cadence), "exactness": asdict(res.exactness),
           "cpu_percent_of_core": res.cpu, "samples": [asdict(s) for s in res.samples]}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)
    return path


# --------------------------------------------------------------------------- main

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


def build_parser() -> argparse.ArgumentParser:
    """Return the benchmark's argument parser."""
    p = argparse.ArgumentParser(prog="bench/e2e.py", description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("throughput", "latency", "all"))
    p.add_argument("--duration", type=float, default=60.0, help="seconds measured after the warm-up (60)")
    p.add_argument("--warmup", type=float, help="seconds before measuring (throughput 20, latency 15)")
    add_job_arguments(p)
    p.add_argument("--state-dir", type=Path, help="where input, logs and results go (default: a temp folder)")
    p.add_argument("--keep", action="store_true", help="keep the state dir afterwards")
    return p


def _raise_interrupt(*_):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the chosen modes; print and write their figures."""
    argv = sys.argv if argv is None else argv
    args = build_parser().parse_args(argv[1:])
    if args.duration < WINDOW * SAMPLE_EVERY or (args.warmup is not None and args.warmup < 0):
        raise SystemExit(f"e2e: --duration must be at least {WINDOW * SAMPLE_EVERY:g} s, --warmup >= 0")
    signal.signal(signal.SIGTERM, _raise_interrupt)
    temp = args.state_dir is None
    state_dir = (Path(tempfile.mkdtemp(prefix="ms-e2e-")) if temp else args.state_dir).resolve()
    machine, git = machine_info(), git_info()
    try:
        nbbo, orders = ensure_data(state_dir / "data", args.symbols, args.wide_share)
        for cfg in mode_configs(args, state_dir):
            run_dir = state_dir / f"run-{cfg.mode}"
            res = run_mode(cfg, {"nbbo": nbbo, "orders": orders}, run_dir)
            if not args.keep:              # a throughput run's log is gigabytes
                shutil.rmtree(run_dir, ignore_errors=True)
            path = write_json(res, machine, git, argv)
            print(f"\ne2e {cfg.mode} (commit {git['commit']}{', dirty' if git['dirty'] else ''}):\n"
                  f"{summary(res)}\n  -> {path.relative_to(ROOT)}\n", flush=True)
    except KeyboardInterrupt:
        print("e2e: interrupted; all processes stopped", file=sys.stderr)
        return 130
    except (RuntimeError, TimeoutError) as e:
        print(f"e2e: run failed: {e}", file=sys.stderr)
        return 1
    finally:
        cleanup(state_dir, temp, args.keep)
    return 0


def cleanup(state_dir: Path, temp: bool, keep: bool) -> None:
    """Delete the run folders (all of a temp state dir; a given one keeps its input data)."""
    if keep:
        print(f"e2e: state kept in {state_dir}", file=sys.stderr)
    elif temp:
        shutil.rmtree(state_dir, ignore_errors=True)
    else:
        for run_dir in state_dir.glob("run-*"):
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
