"""Read how a query's newest run stands now: `batch_age` and `status = failed|lost` rules (schema: docs/METRICS.md).

Both look at each query of the scope (tags run and query) as it is *now*, not over the
rule's window: a dead query writes nothing, so a window would hold no data exactly when
the rule matters. One request of two statements reads, per query, its runs' newest row
(`runs`: status, heartbeat, start) and its newest batch (`spark_progress`), within
`LOOKBACK_S` (the raw retention):

- the newest run is the one started last; its status is the recorded one, or *lost* when
  it says running and neither heartbeat, batch nor start is newer than `LOST_AFTER_S`
  (`collector.run_status.run_status`);
- `batch_age` = now − the newest of (its last batch's end, the newest run's start), for a
  query whose newest run has not finished or stopped (a query stopped on purpose is not
  dead); the oldest such query of the scope counts. A query with batches but no `runs`
  rows (written by an older monitor) is judged by its batches alone.

Every scope value is a `$parameter`; measurement and field names come from the vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass

from collector.influx import InfluxClient
from collector.query.ranges import format_time
from collector.run_status import (FIELD_LAST_SEEN_NS, FIELD_STATUS, STATUS_FINISHED, STATUS_STOPPED, run_status)
from collector.units import NS
from collector.vocabulary import RUNS, SPARK_PROGRESS, TAG_QUERY, TAG_RUN, TAG_RUN_ID

LOOKBACK_S = 7 * 86400.0          # the raw policy's retention: nothing older is there to read
_SCOPE = ((TAG_RUN, "job"), (TAG_QUERY, "query"))


@dataclass(frozen=True)
class QueryNow:
    """One query as it stands: its newest run's status (lost included) and its last sign of life."""
    job: str
    query: str
    run_id: str
    status: str | None                 # None: no `runs` row (an older monitor's batches only)
    last_batch_end_ns: int | None
    started_ns: int | None
    last_seen_ns: int | None

    def labels(self) -> dict[str, str]:
        """Return the labels a notification names the query by."""
        out = {"job": self.job, "query": self.query}
        if self.run_id:
            out["run_id"] = self.run_id
        return out

    def batch_age_ns(self, now_ns: int) -> int | None:
        """Return now − the last batch's end (or the run's start), None for a run that ended on purpose."""
        if self.status in (STATUS_FINISHED, STATUS_STOPPED):
            return None
        marks = [t for t in (self.last_batch_end_ns, self.started_ns) if t is not None]
        return max(0, now_ns - max(marks)) if marks else None


def queries_query(job: str | None, query: str | None, now_ns: int) -> tuple[str, dict]:
    """Return the InfluxQL (two statements) and parameters reading each scoped query's newest run and batch."""
    clauses = ["time >= $since"]
    params = {"since": format_time(now_ns - int(LOOKBACK_S * NS))}
    for tag, value in zip((TAG_RUN, TAG_QUERY), (job, query)):
        if value is not None:
            clauses.append(f'"{tag}" = ${tag}')
            params[tag] = value
    where = " AND ".join(clauses)
    return (f'SELECT last("{FIELD_STATUS}") AS "status", last("{FIELD_LAST_SEEN_NS}") AS "seen", '
            f'last("start_ns") AS "started" FROM "{RUNS}" WHERE {where} GROUP BY "{TAG_RUN}", "{TAG_QUERY}", '
            f'"{TAG_RUN_ID}"; '
            f'SELECT last("batch_ms") AS "batch_ms" FROM "{SPARK_PROGRESS}" WHERE {where} '
            f'GROUP BY "{TAG_RUN}", "{TAG_QUERY}"', params)


def queries_now(series) -> list[QueryNow]:
    """Reduce the two statements' series to one `QueryNow` per (job, query) (pure)."""
    newest: dict[tuple[str, str], tuple[int, str, str | None, int | None]] = {}
    batches: dict[tuple[str, str], int] = {}
    for s in series:
        key = (s.tags.get(TAG_RUN, ""), s.tags.get(TAG_QUERY, ""))
        for row in s.values:
            if s.name == RUNS:
                status, seen, started = row[1], _int(row[2]), _int(row[3])
                rank = started if started is not None else -1
                if key not in newest or rank > newest[key][0]:
                    newest[key] = (rank, s.tags.get(TAG_RUN_ID, ""), status if isinstance(status, str) else None,
                                   seen)
            elif s.name == SPARK_PROGRESS and _int(row[0]) is not None:
                end = _int(row[0]) + int(_int(row[1]) or 0) * 1_000_000
                batches[key] = max(batches.get(key, end), end)
    out = []
    for key in sorted(set(newest) | set(batches)):
        rank, run_id, status, seen = newest.get(key, (-1, "", None, None))
        out.append(QueryNow(key[0], key[1], run_id, status, batches.get(key), rank if rank >= 0 else None, seen))
    return out


def status_now(q: QueryNow, now_ns: int) -> str | None:
    """Return the newest run's status as it stands: lost for a running run gone quiet."""
    if q.status is None:
        return None
    if q.last_seen_ns is None:              # an older monitor's row: it sent no heartbeats to miss
        return run_status(q.status, None, now_ns)
    marks = [t for t in (q.last_seen_ns, q.last_batch_end_ns, q.started_ns) if t is not None]
    return run_status(q.status, max(marks), now_ns)


def read_queries(client: InfluxClient, job: str | None, query: str | None, now_ns: int) -> list[QueryNow]:
    """Return every scoped query as it stands at `now_ns`."""
    q, params = queries_query(job, query, now_ns)
    return queries_now(client.query(q, params))


def _int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
