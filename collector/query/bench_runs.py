"""Performance-test runs (`marketspread bench`) as the compare page reads them, and regressions.

The runs come from the `bench_run`, `bench_step`, `bench_progress` and `process`
measurements (docs/METRICS.md, "Performance-test runs"); each run's start-to-end latency
distribution is merged from the job's own `latency` histograms over the run's measurement
window. Run names from the URL are bound parameters, never spliced into InfluxQL.
`compare_runs` is pure: a run (or a group of runs of one label) is flagged only where
its per-second p99s or throughputs differ from the baseline's beyond their own noise
(collector/query/compare_stats.py) and by more than the threshold.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from collector.histogram import LatencyHistogram
from collector.influx import InfluxClient

from collector.query.compare_stats import Comparison, compare
from collector.query.ranges import TimeRange
from collector.query.series import START_TO_END, TimeSeries, step_rank
from collector.query.store import MetricsStore
from collector.vocabulary import (BENCH_PROGRESS, BENCH_RUN, BENCH_STEP, PROCESS, TAG_LABEL, TAG_PROCESS, TAG_RUN,
                                  TAG_STEP)
DEFAULT_THRESHOLD = 0.05           # 5 % worse than the baseline is a regression


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
    p99_samples: tuple[float, ...] = ()     # start-to-end p99 of each 1-s interval of the window, ns
    eps_samples: tuple[float, ...] = ()     # processed events/s of each second of the window

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


def compare_runs(baseline: Sequence[BenchRun], runs: Sequence[BenchRun], threshold: float = DEFAULT_THRESHOLD
                 ) -> list[Comparison]:
    """Compare a run (or runs of one label) with the baseline's run(s): start-to-end p99, then throughput."""
    return [compare("p99", [r.p99_samples for r in baseline], [r.p99_samples for r in runs], threshold,
                    higher_is_worse=True),
            compare("throughput", [r.eps_samples for r in baseline], [r.eps_samples for r in runs], threshold,
                    higher_is_worse=False)]


def group_by_label(runs: Sequence[BenchRun]) -> list[list[BenchRun]]:
    """Group runs of one label together, in the order each label first appears."""
    groups: dict[str, list[BenchRun]] = {}
    for r in runs:
        groups.setdefault(r.label, []).append(r)
    return list(groups.values())


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
        out = [BenchListing(s.tags.get(TAG_RUN, ""), s.tags.get(TAG_LABEL, ""), int(v[0]), v[1] or "", float(v[2] or 0))
               for s in series for v in s.values[-1:]]
        return sorted(out, key=lambda r: r.started_ns, reverse=True)

    def windows(self) -> dict[str, TimeRange]:
        """Return each recorded run's measurement window (the runs page summarises runs over it)."""
        series = self.client.query(f'SELECT "window_start_ns", "window_end_ns" FROM "{BENCH_RUN}" GROUP BY "run"')
        return {s.tags.get(TAG_RUN, ""): TimeRange(int(v[1]), int(v[2])) for s in series for v in s.values[-1:]
                if v[1] is not None and v[2] is not None and int(v[2]) > int(v[1])}

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
            steps.append(BenchStep(s.tags.get(TAG_STEP, ""), int(r["count"]), *(int(r[k] or 0) for k in
                                   ("p50", "p90", "p95", "p99", "p999", "max"))))
        steps.sort(key=lambda s: step_rank(s.step))
        prog = self.client.query(f'SELECT "processed_eps" FROM "{BENCH_PROGRESS}" WHERE "run" = $run', p)
        throughput = [_series(prog[0].values, prog[0].columns, "processed_eps", "processed")] if prog else []
        cpu, rss = [], []
        for s in self.client.query(f'SELECT "cpu_pct", "rss_bytes" FROM "{PROCESS}" WHERE "run" = $run '
                                   f'GROUP BY "{TAG_PROCESS}"', p):
            name = s.tags.get(TAG_PROCESS, "")
            cpu.append(_series(s.values, s.columns, "cpu_pct", name))
            rss.append(_series(s.values, s.columns, "rss_bytes", name))
        start, end = int(row["window_start_ns"]), int(row["window_end_ns"])
        window = TimeRange(start, end)
        metrics = MetricsStore(self.client)
        hist = metrics.step_histogram(run, START_TO_END, window)
        p99 = next((s for s in metrics.percentiles_over_time(run, window, 1, START_TO_END) if s.name == "p99"), None)
        eps = [v for t, v in zip(throughput[0].times_ns, throughput[0].values) if start <= t < end] \
            if throughput else []
        return BenchRun(run=run, label=row.get("label") or "", started_ns=int(row["time"]),
                        commit=row.get("commit") or "", dirty=bool(row.get("dirty")), rate=int(row.get("rate") or 0),
                        duration_s=float(row.get("duration_s") or 0), window_start_ns=start, window_end_ns=end,
                        events=int(row.get("events") or 0), throughput_eps=float(row.get("throughput_eps") or 0),
                        results=int(row.get("results") or 0), cores=int(row.get("cores") or 0),
                        cpu_model=row.get("cpu_model") or "", mem_total_bytes=int(row.get("mem_total_bytes") or 0),
                        steps=steps, throughput=throughput, cpu=sorted(cpu), rss=sorted(rss), hist=hist,
                        p99_samples=p99.values if p99 else (), eps_samples=tuple(eps))

    def runs(self, names: Sequence[str]) -> tuple[list[BenchRun], list[str]]:
        """Return the recorded runs among `names` (in that order) and the names not found."""
        found, missing = [], []
        for name in names:
            r = self.run(name)
            (found if r is not None else missing).append(r if r is not None else name)
        return found, missing
