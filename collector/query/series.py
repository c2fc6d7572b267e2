"""The latency series as the read side returns them: names, typed records, merged histograms.

Shared by MetricsStore (collector/query/store.py), the alert rules' reads (alerts/query.py)
and the recorded performance-test runs (collector/query/bench_runs.py). Decoded histograms
are cached by their blob, so a live page or a re-evaluated rule re-decodes only the
intervals that are new or re-emitted.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Sequence

from collector.bins import UiBin
from collector.codec import decode
from collector.histogram import LatencyHistogram, SparseCounts

from collector.query.ranges import anchor_ns
from collector.query.run_ends import RunError
from collector.query.run_scope import RunScope
from collector.units import NS

from collector.vocabulary import LATENCY, MARKET_SPREAD_STEPS, STEP_CHECK, STEP_E2E, STEP_INGRESS  # noqa: F401

START_TO_END = STEP_E2E
#: The vocabulary's steps in pipeline order: a run's steps it did not declare sort by it (start-to-end,
#: which spans them all, last), the others by when they were first seen.
_PIPELINE_ORDER = tuple(s for s in MARKET_SPREAD_STEPS if s != START_TO_END)
WALLAROO_PERCENTILES = (50.0, 95.0, 99.0, 99.9, 99.99)
_DECODE_CACHE = 50_000


class SeriesKey(NamedTuple):
    """The tags of one latency series within a run."""
    step: str
    pipeline: str
    worker: str


@dataclass(frozen=True)
class RunInfo:
    """One run as the runs page lists it; throughput and p99 cover its last minute of data.

    A run is one start of a streaming query (`run_id`, Spark's runId, of the query
    `query_id`) under its job `run` (the `run` tag), or a job with latency points only.

    `status` is live, finished, stopped, failed or lost (collector/query/run_ends.py); `live`
    says whether its pages should keep refreshing (live, or an end whose last points are still fresh).
    """
    run: str
    first_ns: int
    last_ns: int
    live: bool
    status: str                       # live, finished, stopped, failed, lost
    events: int                       # start-to-end events over the whole run
    throughput_eps: float | None
    p99_ns: int | None
    backpressure: str | None          # OK / LOW / HIGH from `backpressure`, None if not written
    query_id: str | None = None       # Spark's query id (the newest query's, from `runs`)
    throughput_unit: str = "events/s"  # counted start-to-end (`counts_events`), else "rows/s": Spark's input rows
    last_step: str | None = START_TO_END   # the step whose p99 is `p99_ns` (None: no latency recorded)
    steps: tuple[str, ...] = MARKET_SPREAD_STEPS   # the run's steps in its job's order (`step_order`)
    app_id: str | None = None         # the Spark application the run's queries ran in
    ended_ns: int | None = None       # when it finished, stopped or failed, as recorded (None: not ended or unknown)
    error: RunError | None = None     # why it failed (status failed)
    seen_ns: int | None = None        # its newest sign of life (the time a lost run was last heard of)
    last_batch_end_ns: int | None = None   # a query's run: its newest batch's end
    run_id: str | None = None         # Spark's runId (None: a job with latency points and no query runs)
    query: str | None = None          # the query's `query` tag: its name, or its id when unnamed
    until_ns: int | None = None       # the end of its span: its untagged points' bound (None: open)

    @property
    def scope(self) -> RunScope:
        """Return which points are this run's (collector/query/run_scope.py)."""
        if self.run_id is None:
            return RunScope(self.run)
        return RunScope(self.run, self.run_id, self.query, self.first_ns, self.until_ns)

    @property
    def duration_s(self) -> float:
        """Seconds from the first interval's start to the end of the last one."""
        return (self.last_ns - self.first_ns) / NS + 1.0

    def anchor_ns(self, now_ns: int) -> int:
        """Return where this run's relative time ranges end."""
        return anchor_ns(self.last_ns, now_ns)


@dataclass(frozen=True)
class GroupStats:
    """Latency percentiles and throughput of one row of a breakdown table over a range."""
    label: str
    events: int
    p50_ns: int
    p95_ns: int
    p99_ns: int
    eps_min: float | None
    eps_median: float | None
    eps_max: float | None


class TimeSeries(NamedTuple):
    """Values over time: `times_ns[i]` is the start of the bucket holding `values[i]`."""
    name: str
    times_ns: tuple[int, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class JobView:
    """Everything the job page shows for one run and range."""
    events: int
    steps: list[GroupStats]
    pipelines: list[GroupStats]
    workers: list[GroupStats]
    throughput: list[TimeSeries]          # events/s of start-to-end, one series per pipeline
    percentiles: list[TimeSeries]         # start-to-end p50/p99/p99.9 over time (max over workers)
    interval_s: int


@dataclass(frozen=True)
class StepView:
    """Everything the step page shows for one step of a run over a range."""
    events: int
    bins: list[UiBin]
    hist: LatencyHistogram
    percentiles: dict[float, int]
    throughput: list[TimeSeries]          # events/s, one series per pipeline
    workers: list[GroupStats]
    interval_s: int


@functools.lru_cache(maxsize=_DECODE_CACHE)
def _decode_sparse(blob: str) -> SparseCounts:
    # sparse: a dense histogram is 270 KB, an interval's buckets a few KB
    return decode(blob).to_sparse()


def merge_blobs(blobs: Iterable[str]) -> LatencyHistogram:
    """Return the sum of HdrHistogram V2 blobs (cached decodes)."""
    hist = LatencyHistogram()
    for b in blobs:
        if b:
            hist.add_sparse(_decode_sparse(b))
    return hist


def rate_stats(rates: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """Return (min, median, max) of per-interval rates; Nones when there are none."""
    if not rates:
        return None, None, None
    return min(rates), statistics.median(rates), max(rates)


def group_stats(label: str, hist: LatencyHistogram, rates: Sequence[float]) -> GroupStats:
    """Build one table row from a merged histogram and its per-interval rates."""
    p = hist.percentiles((50.0, 95.0, 99.0))
    return GroupStats(label, hist.total_count, p[50.0], p[95.0], p[99.0], *rate_stats(rates))


def step_rank(step: str, order: Sequence[str] = MARKET_SPREAD_STEPS) -> tuple[int, str]:
    """Return a step's sort key: its place in the run's `order`, unknown steps last by name."""
    return (order.index(step) if step in order else len(order), step)


def counts_events(steps: Iterable[str]) -> bool:
    """Return whether a run's throughput is its events timed start-to-end (the step a job records from its ingress
    to its output), rather than Spark's input rows."""
    return START_TO_END in steps


def step_order(declared: Sequence[str], first_seen: Mapping[str, int]) -> tuple[str, ...]:
    """Return a run's steps in the order its job declared them, then the rest: the vocabulary's own steps in
    pipeline order, the others as first seen, start-to-end last."""
    def rank(s: str) -> tuple:
        known = _PIPELINE_ORDER.index(s) if s in _PIPELINE_ORDER else len(_PIPELINE_ORDER)
        return (s == START_TO_END, known, first_seen[s], s)
    return tuple(dict.fromkeys((*declared, *sorted(first_seen, key=rank))))


def last_step(declared: Sequence[str], first_seen: Mapping[str, int]) -> str | None:
    """Return the step the runs page gives the p99 of: the last declared, else start-to-end, else the last seen."""
    if declared:
        return declared[-1]
    if START_TO_END in first_seen or not first_seen:
        return START_TO_END if first_seen else None
    return max(first_seen, key=lambda s: (first_seen[s], s))
