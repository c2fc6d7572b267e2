"""Where a replay's time went: start-up, ingest, first batch, steady batches, drain, finish.

Pure logic over moments the replay records and the query's progress reports, so users
see at the end of every replay what their wall time was spent on.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class BatchSpan:
    """One micro-batch that read records: when it started (epoch s), how long, how many records."""
    batch_id: int
    start: float
    seconds: float
    records: int
    phases: tuple[tuple[str, float], ...] = ()   # Spark's durationMs parts (s), largest first


@dataclass(frozen=True)
class ReplayMoments:
    """Epoch seconds of a replay's milestones."""
    start: float              # replay() called
    session_built: float      # ingress up, Spark session built (JVM started)
    query_started: float      # ingress up, Spark session built, query started
    ingest_start: float       # first file being sent
    ingested: float           # every file durable in the log
    consumed: float           # the job committed the whole log
    end: float                # query stopped, results written


@dataclass(frozen=True)
class ReplayTiming:
    """A replay's wall time by phase (seconds); phases may overlap (ingest runs during start-up)."""
    total_s: float
    startup_s: float          # start -> query started
    session_s: float          # start -> Spark session built (the part of start-up in the JVM's start)
    ingest_s: float           # ingest_start -> ingested
    wait_s: float             # query started -> first batch started (waiting for records or planning)
    first_batch_s: float      # the first batch with records, trigger to commit
    first_batch_records: int
    first_batch_phases: tuple[tuple[str, float], ...]   # where Spark says the first batch went
    steady_batches: int       # later batches with records
    records: int              # records of all batches reported (the log, when none is missing)
    steady_total_s: float
    steady_median_s: float
    drain_s: float            # ingested -> consumed
    finish_s: float           # consumed -> end

    def summary(self) -> str:
        """Return the breakdown as a few aligned lines."""
        rows = [("start-up", self.startup_s, f"ingress, Spark session ({self.session_s:.2f} s) and query started"),
                ("ingest", self.ingest_s, "files sent and durable in the log"),
                ("to 1st batch", self.wait_s, "query started -> first batch started"),
                ("first batch", self.first_batch_s, f"{self.first_batch_records:,} records" + "".join(
                    f", {name} {sec:.2f}" for name, sec in self.first_batch_phases[:3])),
                ("steady", self.steady_total_s,
                 f"{self.steady_batches} batches, median {self.steady_median_s:.2f} s" + (
                     f"; first / median {self.first_batch_s / self.steady_median_s:.1f}"
                     if self.steady_median_s > 0 else "")),
                ("drain", self.drain_s, "all ingested -> all committed"),
                ("finish", self.finish_s, "query stopped, results written")]
        return "\n".join([f"replay timing: {self.total_s:.1f} s wall"] +
                         [f"  {name:<13s}{sec:6.2f} s  {what}" for name, sec, what in rows])


def batch_spans(progress: list[dict]) -> list[BatchSpan]:
    """Turn query progress reports into the batches that read records, in batch order."""
    spans = {}
    for p in progress:
        src = (p.get("sources") or [{}])[0]
        lo, hi = _seq(src.get("startOffset")), _seq(src.get("endOffset"))
        if hi is None or hi <= (lo or 0):
            continue
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        ms = (p.get("durationMs") or {}).get("triggerExecution", 0)
        parts = sorted(((k, v / 1000.0) for k, v in (p.get("durationMs") or {}).items()
                        if k != "triggerExecution"), key=lambda kv: -kv[1])
        spans[int(p["batchId"])] = BatchSpan(int(p["batchId"]), start, ms / 1000.0, hi - (lo or 0),
                                             tuple(parts))
    return [spans[b] for b in sorted(spans)]


def _seq(offset) -> int | None:
    """The `seq` of a source offset as progress reports it (a JSON string, a dict or None)."""
    if isinstance(offset, str):
        offset = json.loads(offset)
    return None if offset is None else int(offset["seq"])


def replay_timing(m: ReplayMoments, batches: list[BatchSpan]) -> ReplayTiming:
    """Compute the breakdown from the milestones and the batches that read records."""
    first = batches[0] if batches else None
    steady = [b.seconds for b in batches[1:]]
    return ReplayTiming(
        total_s=m.end - m.start, startup_s=m.query_started - m.start,
        session_s=m.session_built - m.start, ingest_s=m.ingested - m.ingest_start,
        wait_s=max(0.0, first.start - m.query_started) if first else 0.0,
        first_batch_s=first.seconds if first else 0.0, first_batch_records=first.records if first else 0,
        first_batch_phases=first.phases if first else (),
        steady_batches=len(steady), records=sum(b.records for b in batches), steady_total_s=sum(steady),
        steady_median_s=statistics.median(steady) if steady else 0.0,
        drain_s=max(0.0, m.consumed - m.ingested), finish_s=m.end - m.consumed)
