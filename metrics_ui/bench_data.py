"""Performance-test runs (`marketspread bench`) as the compare page reads them, and regressions.

The runs come from the `bench_run`, `bench_step`, `bench_progress` and `process`
measurements (docs/METRICS.md, "Performance-test runs"); each run's start-to-end latency
distribution is merged from the job's own `latency` histograms over the run's measurement
window. Run names from the URL are bound parameters, never spliced into InfluxQL.
`regressions` is pure: a run is flagged where its p99 or its throughput is worse than
the baseline's by more than a share.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient

from .data import START_TO_END, MetricsStore, TimeSeries, _step_rank
from .ranges import TimeRange

BENCH_RUN = "bench_run"
BENCH_STEP = "bench_step"
BENCH_PROGRESS = "bench_progress"
PROCESS = "process"
DEFAULT_THRESHOLD = 0.05           # 5 % worse than the baseline is a regression
_EPS = 1e-9                        # exactly at the threshold is not beyond it, whatever the rounding


@dataclass(frozen=True)
class BenchListing:
    """One recorded run as the run picker lists it."""
    run: str
    label: str
    started_ns: int
    commit: str
    throughput_eps: float


@dataclass(frozen=True)
class BenchStep:
    """Latency of one step of a run over its measurement window, in ns."""
    step: str
    count: int
    p50_ns: int
    p90_ns: int
    p95_ns: int
    p99_ns: int
    p999_ns: int
    max_ns: int


@dataclass(frozen=True)
class BenchRun:
    """Everything the compare page shows of one run."""
    run: str
    label: str
    started_ns: int
    commit: str
    dirty: bool
    rate: int
    duration_s: float
    window_start_ns: int
    window_end_ns: int
    events: int
    throughput_eps: float
    results: int
    cores: int
    cpu_model: str
    mem_total_bytes: int
    steps: list[BenchStep]
    throughput: list[TimeSeries]        # processed events/s over time
    cpu: list[TimeSeries]               # % of one core, one series per process tree
    rss: list[TimeSeries]               # bytes, one series per process tree
    hist: LatencyHistogram              # start-to-end over the window

    @property
    def p99_ns(self) -> int | None:
        """The start-to-end p99 of the window (None without data)."""
        s = next((s for s in self.steps if s.step == START_TO_END), None)
        return s.p99_ns if s else None

    def mean(self, series: list[TimeSeries], name: str) -> float | None:
        """Return the mean of one named series, None if it has no values."""
        s = next((s for s in series if s.name == name and s.values), None)
        return sum(s.values) / len(s.values) if s else None

    def peak(self, series: list[TimeSeries], name: str) -> float | None:
        """Return the largest value of one named series, None if it has no values."""
        s = next((s for s in series if s.name == name and s.values), None)
        return max(s.values) if s else None


@dataclass(frozen=True)
class Regression:
    """One figure of a run worse than the baseline's by more than the threshold."""
    run: str
    metric: str                         # "p99" (start-to-end) or "throughput"
    baseline: float
    value: float
    worse_by: float                     # share: 0.12 = 12 % worse


def regressions(baseline: BenchRun, run: BenchRun, threshold: float = DEFAULT_THRESHOLD) -> list[Regression]:
    """Return the run's figures that are worse than the baseline's by more than `threshold` (a share)."""
    out = []
    if baseline.p99_ns and run.p99_ns is not None:
        worse = run.p99_ns / baseline.p99_ns - 1.0           # higher latency is worse
        if worse > threshold + _EPS:
            out.append(Regression(run.run, "p99", baseline.p99_ns, run.p99_ns, worse))
    if baseline.throughput_eps > 0:
        worse = 1.0 - run.throughput_eps / baseline.throughput_eps   # lower throughput is worse
        if worse > threshold + _EPS:
            out.append(Regression(run.run, "throughput", baseline.throughput_eps, run.throughput_eps, worse))
    return out


def parse_threshold(text) -> float:
    """Parse a threshold in percent ("5", 5.0) into a share; raise ValueError with a reason."""
    try:
        pct = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"the regression threshold must be a number of percent, not {text!r}") from None
    if not 0 <= pct <= 1000:
        raise ValueError(f"the regression threshold must be between 0 and 1000 %, not {pct:g}")
    return pct / 100.0


def parse_runs(text: str | None) -> list[str]:
    """Split the URL's `runs=a,b` into run names (empty names dropped, order and first copy kept)."""
    seen: list[str] = []
    for name in (text or "").split(","):
        name = name.strip()
        if name and name not in seen:
            seen.append(name)
    return seen


def _series(rows: list[list], columns: list[str], field: str, name: str) -> TimeSeries:
    i = columns.index(field)
    kept = [(int(r[0]), float(r[i])) for r in rows if r[i] is not None]
    return TimeSeries(name, tuple(t for t, _ in kept), tuple(v for _, v in kept))


class BenchStore:
    """Read-only queries of the performance-test measurements of one database."""

    def __init__(self, client: InfluxClient):
        self.client = client

    def listing(self) -> list[BenchListing]:
        """Return every recorded run, newest first."""
        series = self.client.query(f'SELECT "commit", "throughput_eps" FROM "{BENCH_RUN}" GROUP BY "run", "label"')
        out = [BenchListing(s.tags.get("run", ""), s.tags.get("label", ""), int(v[0]), v[1] or "", float(v[2] or 0))
               for s in series for v in s.values[-1:]]
        return sorted(out, key=lambda r: r.started_ns, reverse=True)

    def run(self, run: str) -> BenchRun | None:
        """Return one recorded run with its steps, series and histogram; None if there is no such run."""
        p = {"run": run}
        head = self.client.query(f'SELECT * FROM "{BENCH_RUN}" WHERE "run" = $run', p)
        if not head or not head[0].values:
            return None
        row = dict(zip(head[0].columns, head[0].values[-1]))
        steps = []
        for s in self.client.query(f'SELECT * FROM "{BENCH_STEP}" WHERE "run" = $run GROUP BY "step"', p):
            r = dict(zip(s.columns, s.values[-1]))
            steps.append(BenchStep(s.tags.get("step", ""), int(r["count"]), *(int(r[k] or 0) for k in
                                   ("p50", "p90", "p95", "p99", "p999", "max"))))
        steps.sort(key=lambda s: _step_rank(s.step))
        prog = self.client.query(f'SELECT "processed_eps" FROM "{BENCH_PROGRESS}" WHERE "run" = $run', p)
        throughput = [_series(prog[0].values, prog[0].columns, "processed_eps", "processed")] if prog else []
        cpu, rss = [], []
        for s in self.client.query(f'SELECT "cpu_pct", "rss_bytes" FROM "{PROCESS}" WHERE "run" = $run '
                                   f'GROUP BY "process"', p):
            name = s.tags.get("process", "")
            cpu.append(_series(s.values, s.columns, "cpu_pct", name))
            rss.append(_series(s.values, s.columns, "rss_bytes", name))
        start, end = int(row["window_start_ns"]), int(row["window_end_ns"])
        hist = MetricsStore(self.client).step_histogram(run, START_TO_END, TimeRange(start, end))
        return BenchRun(run=run, label=row.get("label") or "", started_ns=int(row["time"]),
                        commit=row.get("commit") or "", dirty=bool(row.get("dirty")), rate=int(row.get("rate") or 0),
                        duration_s=float(row.get("duration_s") or 0), window_start_ns=start, window_end_ns=end,
                        events=int(row.get("events") or 0), throughput_eps=float(row.get("throughput_eps") or 0),
                        results=int(row.get("results") or 0), cores=int(row.get("cores") or 0),
                        cpu_model=row.get("cpu_model") or "", mem_total_bytes=int(row.get("mem_total_bytes") or 0),
                        steps=steps, throughput=throughput, cpu=sorted(cpu), rss=sorted(rss), hist=hist)

    def runs(self, names: Sequence[str]) -> tuple[list[BenchRun], list[str]]:
        """Return the recorded runs among `names` (in that order) and the names not found."""
        found, missing = [], []
        for name in names:
            r = self.run(name)
            (found if r is not None else missing).append(r if r is not None else name)
        return found, missing
