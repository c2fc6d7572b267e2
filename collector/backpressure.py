"""Flink's busy / backpressured / idle figures, applied to micro-batches (pure, no I/O).

Flink reports, per task and per second, the share of wall time it was busy, backpressured
(blocked on a full output) or idle, and calls a ratio <= 10 % OK, <= 50 % LOW, above HIGH.
Here the parts that can saturate are measured from what they already report:

- **job** (any Spark query, `query_figures`): busy share = the part of a window covered by
  micro-batches (trigger start to trigger start + batch duration), from the listener's
  progress records, beside Spark's input and processing rates, the share of batches over
  the trigger and the rows behind. Nothing downstream pushes back on a query; its
  backpressured share is how much its source was held back by it, when the source tells
  (Market Spread's ingress: its muted share), and then that share gives its status.
- **ingress**: backpressured share = the part of a window its sockets were muted because
  the job's backlog was too large (`muted_seconds` of the `ingress` measurement).

Busy share is reported beside the status, not folded in: with a zero trigger interval
Spark starts the next batch as soon as data waits, so a job that keeps up with a steady
stream is ~100 % busy by design; read busy together with `backlog_growth_per_s` (> 0:
falling behind).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, NamedTuple, Protocol, Sequence

from collector.influx import Point
from collector.units import NS
from collector.vocabulary import BACKPRESSURE, STEP_INGRESS, STEP_JOB, TAG_RUN, TAG_STEP  # noqa: F401 (importers' names)
OK, LOW, HIGH = "OK", "LOW", "HIGH"
OK_MAX, LOW_MAX = 0.10, 0.50          # Flink's thresholds (inclusive upper bounds)
WINDOW_S = 10.0
BUSY_SATURATED = 0.9


class BatchTiming(Protocol):
    """What busy share needs of a batch: when it ended and how long it ran."""

    @property
    def end_ns(self) -> int: ...

    @property
    def batch_ms(self) -> int: ...


class BatchSpan(NamedTuple):
    """A batch's end time (ns) and duration (ms); the simplest `BatchTiming`."""
    end_ns: int
    batch_ms: int


class IngressSample(NamedTuple):
    """One `ingress` status sample: cumulative muted seconds and the backlog in events."""
    ts_ns: int
    muted_seconds: float
    backlog: int


@dataclass(frozen=True)
class BackpressureFigures:
    """One step's figures over a window; None where the step cannot know a figure."""
    busy_share: float | None
    backpressured_share: float | None
    idle_share: float | None
    backlog: int | None
    backlog_growth_per_s: float | None
    status: str
    # any query's figures (query_figures): Spark's rates over the window, batches over the trigger
    input_rows_per_s: float | None = None
    processed_rows_per_s: float | None = None
    overrun_share: float | None = None


def status(share: float | None) -> str:
    """Classify a share of wall time as Flink does: OK (<= 10 %), LOW (<= 50 %), HIGH."""
    if share is None or share <= OK_MAX:
        return OK
    return LOW if share <= LOW_MAX else HIGH


def worse(a: str, b: str) -> str:
    """The worse of two statuses (OK < LOW < HIGH)."""
    order = (OK, LOW, HIGH)
    return max(a, b, key=order.index)


def busy_share(batches: Iterable[BatchTiming], start_ns: int, end_ns: int) -> float:
    """Return the share of [start_ns, end_ns) covered by the batches (overlaps counted once)."""
    if end_ns <= start_ns:
        return 0.0
    spans = sorted((b.end_ns - int(b.batch_ms) * 1_000_000, b.end_ns) for b in batches)
    covered, reach = 0, start_ns
    for s, e in spans:
        s, e = max(s, reach), min(e, end_ns)
        if e > s:
            covered += e - s
            reach = e
    return min(1.0, covered / (end_ns - start_ns))


def muted_share(samples: Sequence[IngressSample]) -> float | None:
    """Return the share of the samples' time span spent muted; None under two samples.

    `muted_seconds` is cumulative; a drop (an ingress restart) counts the new value as the
    increase, as Prometheus' rate() treats counter resets.
    """
    if len(samples) < 2:
        return None
    s = sorted(samples, key=lambda x: x.ts_ns)
    span = (s[-1].ts_ns - s[0].ts_ns) / NS
    if span <= 0:
        return None
    muted = sum(b.muted_seconds - a.muted_seconds if b.muted_seconds >= a.muted_seconds else b.muted_seconds
                for a, b in zip(s, s[1:]))
    return min(1.0, max(0.0, muted / span))


def backlog_growth(samples: Sequence[tuple[int, int]]) -> float | None:
    """Return the backlog's change per second from (ts_ns, backlog) samples; None under two."""
    if len(samples) < 2:
        return None
    s = sorted(samples)
    dt = (s[-1][0] - s[0][0]) / NS
    return (s[-1][1] - s[0][1]) / dt if dt > 0 else None


class QueryBatch(Protocol):
    """What a query's backpressure needs of a batch (spark_listener's `BatchProgress` has it)."""

    @property
    def ts_ns(self) -> int: ...

    @property
    def end_ns(self) -> int: ...

    @property
    def batch_ms(self) -> int: ...

    @property
    def input_blocks(self) -> int: ...

    @property
    def rows_behind(self) -> int | None: ...


def query_figures(batches: Sequence[QueryBatch], end_ns: int, trigger_ms: int | None, window_s: float = WINDOW_S,
                  not_before_ns: int | None = None, held_back_share: float | None = None) -> BackpressureFigures:
    """Compute any query's figures over the `window_s` seconds before `end_ns`, as Spark users read them.

    A query falls behind when its batches overrun the trigger interval (Spark's own
    warning, "Current batch is falling behind") or, with no trigger, when rows arrive
    faster than a batch processes them while the rows behind grow. Status: the share of
    the window's batches over the trigger, on Flink's thresholds (OK <= 10 %, LOW <= 50 %,
    HIGH above); HIGH whenever the rows behind grow while the query is saturated: its input
    rate above its processing rate, or (no trigger: batches back to back, where the two
    rates are equal by construction) busy for `BUSY_SATURATED` of the window. Rates are Spark's definitions over the window: input rows per second of wall
    time, and rows per second of batch time.

    `held_back_share`: the share of the window the query's source was held back by it, when
    the source tells (Market Spread's ingress mutes its sockets while the job's backlog is
    too large). It is the query's backpressured share and, being measured, replaces the
    inference from growth: the status is the worse of its own and the overrun's. A job
    whose batches run back to back is ~100 % busy by design and its rows behind move up
    and down each batch, so the inference would flap where the source says it is fine.
    """
    start = end_ns - int(window_s * NS)
    if not_before_ns is not None:
        start = max(start, not_before_ns)
    recent = [b for b in batches if start <= b.end_ns <= end_ns]
    busy = busy_share(recent, start, end_ns)
    rows = sum(int(b.input_blocks) for b in recent)
    span_s = (end_ns - start) / NS
    batch_s = sum(int(b.batch_ms) for b in recent) / 1000
    input_rate = rows / span_s if span_s > 0 else None
    processed_rate = rows / batch_s if batch_s > 0 else None
    overrun = sum(int(b.batch_ms) > trigger_ms for b in recent) / len(recent) if trigger_ms and recent else None
    behind = [(b.end_ns, int(b.rows_behind)) for b in recent if b.rows_behind is not None]
    growth = backlog_growth(behind)
    state = status(overrun)
    saturated = busy >= BUSY_SATURATED or (input_rate or 0) > (processed_rate or float("inf"))
    if held_back_share is not None:
        state = worse(state, status(held_back_share))
    elif saturated and (growth or 0) > 0:
        state = HIGH
    return BackpressureFigures(busy, held_back_share, 1.0 - busy, max(behind)[1] if behind else None, growth, state,
                               input_rate, processed_rate, overrun)


def ingress_figures(samples: Sequence[IngressSample], end_ns: int | None = None,
                    window_s: float = WINDOW_S) -> BackpressureFigures:
    """Compute the ingress' figures over the `window_s` seconds before `end_ns` (default: last sample)."""
    if end_ns is None:
        end_ns = max((s.ts_ns for s in samples), default=0)
    start = end_ns - int(window_s * NS)
    recent = sorted((s for s in samples if start <= s.ts_ns <= end_ns), key=lambda s: s.ts_ns)
    muted = muted_share(recent)
    return BackpressureFigures(None, muted, None, recent[-1].backlog if recent else None,
                               backlog_growth([(s.ts_ns, s.backlog) for s in recent]), status(muted))


@dataclass(frozen=True)
class StepBusy:
    """How long one task kept each step busy in one batch (ns), and when it finished."""
    worker: str
    end_ns: int
    busy_ns: dict[str, int]

    def to_bytes(self) -> bytes:
        return json.dumps({"worker": self.worker, "end_ns": self.end_ns, "busy_ns": self.busy_ns}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "StepBusy":
        """Decode `to_bytes`' output; ValueError for anything else."""
        try:
            d = json.loads(data)
            return cls(str(d["worker"]), int(d["end_ns"]), {str(k): int(v) for k, v in d["busy_ns"].items()})
        except (KeyError, TypeError, AttributeError) as e:      # JSON, not a task's busy times
            raise ValueError(f"not a task's busy times: {e!r}") from None


def step_figures(busy: Iterable[StepBusy], step: str, end_ns: int, tasks: int,
                 window_s: float = WINDOW_S) -> BackpressureFigures:
    """A step's busy share over the `window_s` seconds before `end_ns`, across `tasks` tasks.

    Busy share = the step's busy time in the tasks that finished in the window, over the
    window times the number of tasks (Flink's per-subtask figure, averaged). Steps run
    one after another inside a task and never wait on an output, so their backpressured
    share is 0 and their status OK: when the job falls behind, it is the ingress
    upstream that is backpressured (muted), as Flink shows it on the upstream task.
    """
    start = end_ns - int(window_s * NS)
    spent = sum(b.busy_ns.get(step, 0) for b in busy if start < b.end_ns <= end_ns)
    share = min(1.0, spent / (window_s * NS * max(1, tasks)))
    return BackpressureFigures(share, 0.0, 1.0 - share, None, None, status(0.0))


def backpressure_point(run: str, step: str, figures: BackpressureFigures, ts_ns: int) -> Point:
    """One `backpressure` point (tags run, step); figures a step cannot know are left out."""
    fields: dict[str, int | float | str] = {"status": figures.status}
    for name in ("busy_share", "backpressured_share", "idle_share", "backlog_growth_per_s", "input_rows_per_s",
                 "processed_rows_per_s", "overrun_share"):
        v = getattr(figures, name)
        if v is not None:
            fields[name] = float(v)
    if figures.backlog is not None:
        fields["backlog"] = int(figures.backlog)
    return Point(BACKPRESSURE, {TAG_RUN: run, TAG_STEP: step}, fields, int(ts_ns))
