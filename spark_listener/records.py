"""Spark's query events as small frozen records, parsed from its progress objects.

What the listener's callbacks hand to its consumer thread (listener.py): events counted
in log records rather than Spark's rows (the source emits blocks of events). Pure
conversion: any object with the progress' attributes will do, so tests need no Spark.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping, Union

from collector.run_status import STATUS_FINISHED, STATUS_STOPPED

from spark_listener.failure import FailureReason
from spark_listener.query_figures import SourceFigures, StateFigures, source_figures, state_figures, watermark_ns

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


#: Spark's triggers under which a query ends by itself once its input runs out (class names, `$` dropped).
SELF_ENDING_TRIGGERS = ("AvailableNowTrigger", "OneTimeTrigger")


@dataclass(frozen=True)
class QueryStart:
    """A query (run) started; `trigger` is Spark's trigger class (`ProcessingTimeTrigger`, ...) when known."""
    run: str
    query: str
    query_id: str
    run_id: str                   # Spark's runId: new at every (re)start of the query
    start_ns: int
    trigger: str | None = None


@dataclass(frozen=True)
class QueryEnd:
    """A query (run) terminated; `error` is None when it stopped without an exception."""
    run: str
    query: str
    query_id: str
    run_id: str
    end_ns: int
    error: str | None


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch as Spark reported it, in events rather than blocks."""
    run: str
    query: str
    query_id: str
    run_id: str
    batch_id: int
    ts_ns: int                                  # trigger start (progress.timestamp)
    batch_ms: int
    events: int | None                          # sum of end.seq - start.seq over the sources
    input_events_per_s: float | None            # events / gap since the previous trigger start
    processed_events_per_s: float | None        # events / batch duration
    durations_ms: Mapping[str, int] = field(default_factory=dict)
    state_rows: int | None = None
    state_memory_bytes: int | None = None
    backlog: int | None = None                  # latestOffset.seq - endOffset.seq
    end_seq: int | None = None
    input_blocks: int = 0                       # Spark's numInputRows
    # What every query reports, whatever its source (spark_listener/query_figures.py):
    input_rows_per_s: float | None = None       # Spark's inputRowsPerSecond
    processed_rows_per_s: float | None = None   # Spark's processedRowsPerSecond
    watermark_ns: int | None = None
    late_rows: int | None = None                # dropped by the watermark, over the state operators
    rows_behind: int | None = None              # over the sources that tell
    sources: tuple[SourceFigures, ...] = ()
    operators: tuple[StateFigures, ...] = ()

    @property
    def end_ns(self) -> int:
        """When the batch ended (trigger start + batch duration)."""
        return self.ts_ns + self.batch_ms * 1_000_000


@dataclass(frozen=True)
class OpenRunsEnd:
    """The monitor stops or its session is gone: every run seen to start and not end ends now.

    `reason`: the script's own exception when it raised (the runs end failed), else None
    (they end stopped).
    """
    end_ns: int
    reason: FailureReason | None = None


Record = Union[QueryStart, QueryEnd, BatchProgress, OpenRunsEnd]


def clean_end_status(trigger: str | None) -> str:
    """Return how a run that ended without an exception ended: finished or stopped.

    Spark's termination event says only whether there was an exception. A query under an
    `availableNow` or `once` trigger ends by itself when its input runs out: finished.
    Any other query runs until something stops it (`query.stop()`, the session, the
    script): stopped. An `availableNow` query stopped before its input ran out reads
    finished too: Spark tells the two apart nowhere.
    """
    if trigger is not None and trigger.rstrip("$") in SELF_ENDING_TRIGGERS:
        return STATUS_FINISHED
    return STATUS_STOPPED


def parse_timestamp_ns(ts: str) -> int:
    """Return ns since the epoch of Spark's ISO-8601 UTC timestamp ("2024-05-01T12:00:00.123Z")."""
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


def offset_seq(raw: Any) -> int | None:
    """Return the `seq` of a source offset (JSON text or dict); None if absent or null."""
    if raw is None:
        return None
    if isinstance(raw, str):
        if raw in ("", "None", "null"):             # PySpark renders a JVM null as "None"
            return None
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if isinstance(raw, dict) and "seq" in raw:
        return int(raw["seq"])
    return None


def _source_figures(sources, latest_fn=None) -> tuple[int | None, int | None, int | None]:
    """Return (events, backlog, end seq) summed over the sources that report seq offsets.

    A source that reports no latest offset (Spark's simple stream readers never do) is
    asked through `latest_fn()`, if given.
    """
    events = backlog = end_seq = None
    for src in sources or ():
        end = offset_seq(src.endOffset)
        if end is None:
            continue
        # A fresh checkpoint's first batch has no start: it reads from initialOffset {"seq": 0}.
        start = offset_seq(src.startOffset) or 0
        events = (events or 0) + max(0, end - start)
        end_seq = (end_seq or 0) + end
        latest = offset_seq(getattr(src, "latestOffset", None))
        if latest is None and latest_fn is not None:
            latest = latest_fn()
        if latest is not None:
            backlog = (backlog or 0) + max(0, latest - end)
    return events, backlog, end_seq


def progress_record(run: str, p, prev_ts_ns: int | None, latest_fn=None, state_fn=None) -> BatchProgress:
    """Convert a StreamingQueryProgress (or look-alike) into a `BatchProgress`.

    `latest_fn()`: the source's latest offset (seq), for sources that do not report it.
    `state_fn()`: (rows, bytes) of state a query keeps outside Spark's state store, for
    queries whose progress has no state operators (or None).
    """
    ts_ns = parse_timestamp_ns(p.timestamp)
    durations = {str(k): int(v) for k, v in dict(p.durationMs or {}).items()}
    batch_ms = getattr(p, "batchDuration", None)
    batch_ms = int(batch_ms if batch_ms is not None else durations.get("triggerExecution", 0))
    events, backlog, end_seq = _source_figures(p.sources, latest_fn)
    ops = list(p.stateOperators or ())
    state_rows = sum(int(o.numRowsTotal) for o in ops) if ops else None
    state_bytes = sum(int(o.memoryUsedBytes) for o in ops) if ops else None
    if not ops and state_fn is not None and (own := state_fn()) is not None:
        state_rows, state_bytes = own
    gap_s = (ts_ns - prev_ts_ns) / 1e9 if prev_ts_ns is not None else 0.0
    sources = source_figures(p.sources)
    operators = state_figures(ops)
    behind = [s.rows_behind for s in sources if s.rows_behind is not None]
    return BatchProgress(
        run=run, query=p.name or str(p.id), query_id=str(p.id), run_id=str(p.runId),
        batch_id=int(p.batchId), ts_ns=ts_ns, batch_ms=batch_ms, events=events,
        input_events_per_s=events / gap_s if events is not None and gap_s > 0 else None,
        processed_events_per_s=events * 1000.0 / batch_ms if events is not None and batch_ms > 0 else None,
        durations_ms=durations,
        state_rows=state_rows, state_memory_bytes=state_bytes,
        backlog=backlog, end_seq=end_seq, input_blocks=int(p.numInputRows or 0),
        input_rows_per_s=_rate(getattr(p, "inputRowsPerSecond", None)),
        processed_rows_per_s=_rate(getattr(p, "processedRowsPerSecond", None)),
        watermark_ns=watermark_ns(getattr(p, "eventTime", None), parse_timestamp_ns),
        late_rows=sum(o.late_rows for o in operators) if operators else None,
        rows_behind=sum(behind) if behind else backlog,
        sources=sources, operators=operators)


def _rate(v: Any) -> float | None:
    """Return Spark's rate as a float; None when absent or NaN (Spark's rate over no time)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None
