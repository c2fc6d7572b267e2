"""How each query's newest run stands now, in InfluxQL: `MetricsReader.queries_now` for InfluxDB.

One request of two statements reads, per query (tags run and query), its runs' newest row
(`runs`: status, heartbeat, start) and its newest batch (`spark_progress`), within
`LOOKBACK_S` (the raw retention); `queries_now` reduces them to one `QueryNow` each: the
newest run is the one started last; a query with batches but no `runs` rows (written by
an older monitor) is judged by its batches alone. Every scope value is a `$parameter`.
"""
from __future__ import annotations

from collector.catalogue import FIELD_BATCH_MS
from collector.query.ranges import format_time
from collector.run_status import FIELD_LAST_SEEN_NS, FIELD_STATUS
from collector.units import NS
from collector.metrics.views import QueryNow
from collector.vocabulary import RUNS, SPARK_PROGRESS, TAG_QUERY, TAG_RUN, TAG_RUN_ID

LOOKBACK_S = 7 * 86400.0          # the raw policy's retention: nothing older is there to read
FIELD_START_NS = "start_ns"


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
            f'last("{FIELD_START_NS}") AS "started" FROM "{RUNS}" WHERE {where} GROUP BY "{TAG_RUN}", '
            f'"{TAG_QUERY}", "{TAG_RUN_ID}"; '
            f'SELECT last("{FIELD_BATCH_MS}") AS "{FIELD_BATCH_MS}" FROM "{SPARK_PROGRESS}" WHERE {where} '
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


def _int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
