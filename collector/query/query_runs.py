"""A query's runs as `runs` rows and `spark_progress` points tell them (the records the runs page reads).

A run is one start of a query (Spark's runId: the `run_id` tag, or, on rows written before
it, their `spark_run_id` field); its query is Spark's query id. Rows written before the tag
share one series per query, a row per start: each is a run, its span up to the next.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from collector.query.run_ends import RunError, run_error
from collector.run_status import (FIELD_ERROR, FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE,
                                  FIELD_LAST_SEEN_NS, FIELD_STATUS)


@dataclass(frozen=True)
class QueryRun:
    """A query's newest `runs` row: what the runs page lists and the job page follows."""
    query: str
    query_id: str | None
    status: str | None                   # the row's: running, finished, stopped, failed (collector/run_status.py)
    app_id: str | None
    trigger_ms: int | None
    steps: tuple[str, ...]               # the latency steps the job declared, in order
    started_ns: int | None = None        # the row's time: the query's start
    ended_ns: int | None = None          # its recorded end (`end_ns`), None while running
    last_seen_ns: int | None = None      # the monitor's newest heartbeat for it (None: rows from before heartbeats)
    error: RunError | None = None        # why it failed
    batch_end_ns: int | None = None      # its newest batch's end (trigger start + duration)


@dataclass(frozen=True)
class QuerySummary:
    """One query run (one start of a query) as `runs` and `spark_progress` tell it, for the runs page."""
    run: str                             # its job: the `run` tag
    first_ns: int | None                 # the first and newest micro-batch's trigger start (None: no progress yet)
    last_ns: int | None
    rows: int                            # numInputRows over the run
    queries: tuple[QueryRun, ...]        # its `runs` row (none for batches written without one)
    started_ns: int | None = None        # its start (`runs`), for a run with no batch yet
    last_end_ns: int | None = None       # the newest batch's end
    run_id: str | None = None            # Spark's runId (None: batches of a query without a `runs` row)
    query: str = ""                      # the `query` tag: the query's name, or its id when unnamed
    query_id: str | None = None
    next_start_ns: int | None = None     # the next run of the same query's start (None: it is the newest)

    @property
    def declared_steps(self) -> tuple[str, ...]:
        """Return the steps the run's query declared, without repeats."""
        return tuple(dict.fromkeys(s for q in self.queries for s in q.steps))


class Batches:
    """A run's first and newest batch and its rows, as the summaries' statements find them."""

    def __init__(self):
        self.first_ns: int | None = None
        self.newest: tuple[int, int] | None = None        # (trigger start, end)
        self.rows = 0

    def add(self, r: dict) -> None:
        t = int(r["time"])
        if r.get("rows") is not None:
            self.rows = int(r["rows"] or 0)
        elif "newest_ms" in r:
            self.newest = (t, t + int(r["newest_ms"] or 0) * 1_000_000)
        elif "first_ms" in r:
            self.first_ns = t


@dataclass
class FoundRun:
    """A query run found by `query_summaries`, before its summary is made."""
    job: str
    query: str
    run_id: str | None
    row: dict | None
    batches: Batches
    next_ns: int | None                  # an untagged row's next start of the same query (its span's end)

    def summary(self, next_start_ns: int | None) -> QuerySummary:
        b, row = self.batches, self.row
        queries = (query_run(self.query, row, b.newest),) if row is not None else ()
        query_id = (row.get("query_id") if row is not None else None) or None
        started = int(row["time"]) if row is not None else None
        return QuerySummary(self.job, b.first_ns, b.newest[0] if b.newest else None, b.rows, queries, started,
                            b.newest[1] if b.newest else None, self.run_id, self.query, query_id, next_start_ns)


def run_id_of(row: dict) -> str:
    """Return a `runs` row's Spark run id: its field, else its start (rows older than the field)."""
    rid = row.get("spark_run_id")
    return str(rid) if rid else f"start-{int(row['time'])}"


def next_starts(runs: Sequence[FoundRun]) -> dict[int, int]:
    """Return, by `id`, each run's next start of the same query (job and query tag) after its own."""
    by_query: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for f in runs:
        if f.row is not None:
            by_query[(f.job, f.query)].append((int(f.row["time"]), id(f)))
    out = {}
    for starts in by_query.values():
        starts.sort()
        for (_, a), (t, _) in zip(starts, starts[1:]):
            out[a] = t
    return out


#: A `runs` row's fields the read side uses (collector/run_status.py has the statuses and error fields).
RUNS_COLUMNS = ", ".join(f'"{f}"' for f in (
    "query_id", FIELD_STATUS, "app_id", "trigger_ms", "steps", "end_ns", FIELD_LAST_SEEN_NS, FIELD_ERROR,
    FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE))


def query_run(query: str, r: dict, batch: tuple[int, int] | None) -> QueryRun:
    """Return a query's newest `runs` row, with its newest batch's end, as a QueryRun."""
    return QueryRun(query, r.get("query_id"), r.get(FIELD_STATUS), r.get("app_id"), opt_int(r.get("trigger_ms")),
                    parse_steps(r.get("steps")), int(r["time"]), opt_int(r.get("end_ns")),
                    opt_int(r.get(FIELD_LAST_SEEN_NS)), run_error(r), batch[1] if batch else None)


def opt_int(v) -> int | None:
    """Return a field as an int (None stays None)."""
    return None if v is None else int(v)


def parse_steps(raw) -> tuple[str, ...]:
    """Return the steps of a `runs` point's JSON `steps` field; () for none or anything not a list of names."""
    if not isinstance(raw, str) or not raw:
        return ()
    try:
        steps = json.loads(raw)
    except ValueError:
        return ()
    return tuple(s for s in steps if isinstance(s, str) and s) if isinstance(steps, list) else ()
