"""`InfluxReader`: the alerts' read interface (`collector.metrics.backend.MetricsReader`) over InfluxDB.

Each view is one InfluxQL request of its own here (figures: `figure_reads`; queries as
they stand: `run_reads`), so nothing above this package builds InfluxQL. Measurement,
field and tag names come from the vocabulary and the catalogue; every value a user typed
is a `$parameter`. Errors are `InfluxError`s, i.e. `MetricsError`s.
"""
from __future__ import annotations

from typing import Mapping

from collector.catalogue import LEVELS, QUERY
from collector.influx import figure_reads, run_reads
from collector.influx.client import InfluxClient
from collector.metrics.point import Point
from collector.metrics.views import FigureRequest, Heartbeat, HistoryRow, QueryNow, SeriesValue
from collector.query.ranges import format_time
from collector.vocabulary import (ALERT_EVENTS, ALERT_LEASE, ALERT_NOTIFICATIONS, FIELD_COUNT, LATENCY, RUNS,
                                  TAG_NAMESPACE, TAG_RULE, TAG_RUN)

TAG_HOLDER = "holder"
FIELD_STARTED_NS, FIELD_RELEASED = "started_ns", "released"


class InfluxReader:
    """The typed views alerts read, from one InfluxDB database (`client`)."""

    def __init__(self, client: InfluxClient):
        self.client = client

    def __repr__(self) -> str:
        return f"InfluxReader({self.client.url})"

    @property
    def where(self) -> str:
        return f"InfluxDB at {self.client.url}"

    # -- figures and queries

    def read_figure(self, request: FigureRequest) -> list[SeriesValue]:
        return figure_reads.read_figure(self.client, request)

    def queries_now(self, job: str | None, query: str | None, now_ns: int) -> list[QueryNow]:
        q, params = run_reads.queries_query(job, query, now_ns)
        return run_reads.queries_now(self.client.query(q, params))

    # -- names a rule may use

    def known_jobs(self) -> tuple[str, ...]:
        measurements = tuple(dict.fromkeys((LATENCY, RUNS) + tuple(lv.measurement for lv in LEVELS.values()
                                                                    if TAG_RUN in lv.tags)))
        shows = "; ".join(f'SHOW TAG VALUES FROM "{m}" WITH KEY = "{TAG_RUN}"' for m in measurements)
        names = {v[1] for s in self.client.query(shows) for v in s.values}
        # the newest point per job of the measurements every job writes (LIMIT 1: one block per series)
        newest = "; ".join(f'SELECT {fields} FROM "{m}" GROUP BY "{TAG_RUN}" ORDER BY time DESC LIMIT 1'
                           for m, fields in ((LATENCY, f'"{FIELD_COUNT}"'), (LEVELS[QUERY].measurement, "*"),
                                             (RUNS, "*")))
        last: dict[str, int] = {}
        for s in self.client.query(newest):
            run = s.tags.get(TAG_RUN, "")
            for row in s.values[:1]:
                last[run] = max(last.get(run, 0), int(row[0]))
        return tuple(sorted(names, key=lambda n: (-last.get(n, 0), n)))

    def has_data(self, measurement: str, field: str | None, tags: Mapping[str, str]) -> bool:
        where = " AND ".join(f'"{k}" = ${k}' for k in tags)
        where = f" WHERE {where}" if where else ""
        if field is None:
            q = f'SHOW SERIES FROM "{measurement}"{where} LIMIT 1'
        else:
            q = f'SELECT "{field}" FROM "{measurement}"{where} LIMIT 1'
        return any(s.values for s in self.client.query(q, dict(tags) or None))

    def tag_values(self, measurement: str, key: str, where: Mapping[str, str]) -> tuple[str, ...]:
        clauses = " AND ".join(f'"{k}" = ${k}' for k in where)
        q = f'SHOW TAG VALUES FROM "{measurement}" WITH KEY = "{key}"' + (f" WHERE {clauses}" if clauses else "")
        return tuple(sorted({v[1] for s in self.client.query(q, dict(where) or None) for v in s.values}))

    def steps(self, run: str) -> list[str]:
        from collector.query.store import MetricsStore  # lazy: the pages' store, for checking a new rule only
        return MetricsStore(self.client).steps(run)

    def step_filters(self, run: str, step: str) -> tuple[list[str], list[str]]:
        from collector.query.store import MetricsStore  # lazy: as above
        return MetricsStore(self.client).step_filters(run, step)

    # -- the evaluators' lease

    def heartbeat(self, namespace: str, holder: str, started_ns: int, released: bool, at_ns: int) -> None:
        self.client.write([Point(ALERT_LEASE, {TAG_NAMESPACE: namespace, TAG_HOLDER: holder},
                                 {FIELD_STARTED_NS: started_ns, FIELD_RELEASED: released}, at_ns)])

    def heartbeats(self, namespace: str, since_ns: int) -> list[Heartbeat]:
        q = (f'SELECT last("{FIELD_STARTED_NS}") AS "started", last("{FIELD_RELEASED}") AS "released" '
             f'FROM "{ALERT_LEASE}" WHERE "{TAG_NAMESPACE}" = $ns AND time > $since GROUP BY "{TAG_HOLDER}"; '
             f'SELECT last("{FIELD_STARTED_NS}") FROM "{ALERT_LEASE}" WHERE "{TAG_NAMESPACE}" = $ns '
             f'AND time > $since GROUP BY "{TAG_HOLDER}"')
        series = self.client.query(q, {"ns": namespace, "since": format_time(since_ns)})
        seen = {s.tags.get(TAG_HOLDER, ""): int(s.values[-1][0]) for s in series
                if s.columns[1:] == ["last"] and s.values}
        out = []
        for s in series:
            if s.columns[1:] != ["started", "released"] or not s.values:
                continue
            _, started, released = s.values[-1]
            hid = s.tags.get(TAG_HOLDER, "")
            if hid in seen:
                out.append(Heartbeat(hid, started if isinstance(started, int) else None, released is True,
                                     seen[hid]))
        return out

    # -- alert history

    @staticmethod
    def _mine(namespace: str, legacy: bool) -> tuple[str, dict]:
        if legacy:                                  # an absent tag compares equal to ''
            return f'("{TAG_NAMESPACE}" = $namespace OR "{TAG_NAMESPACE}" = \'\')', {"namespace": namespace}
        return f'"{TAG_NAMESPACE}" = $namespace', {"namespace": namespace}

    def history_latest(self, namespace: str, legacy: bool) -> list[HistoryRow]:
        where, params = self._mine(namespace, legacy)
        series = self.client.query(f'SELECT * FROM "{ALERT_EVENTS}" WHERE {where} GROUP BY "{TAG_RULE}" '
                                   'ORDER BY time DESC LIMIT 1', params)
        return [_row(s.tags.get(TAG_RULE, ""), rows[0]) for s in series if (rows := s.rows())]

    def history_events(self, namespace: str, legacy: bool, rule: str, limit: int) -> list[HistoryRow]:
        where, params = self._mine(namespace, legacy)
        q = (f'SELECT * FROM "{ALERT_EVENTS}" WHERE "{TAG_RULE}" = $rule AND {where} '
             f'ORDER BY time DESC LIMIT {int(limit)}')
        return [_row(rule, row) for s in self.client.query(q, {**params, "rule": rule}) for row in s.rows()]

    def history_notifications(self, namespace: str, legacy: bool, rule: str | None, limit: int,
                              failed_only: bool) -> list[HistoryRow]:
        where, params = self._mine(namespace, legacy)
        clauses = [where]
        if rule is not None:
            clauses.append(f'"{TAG_RULE}" = $rule')
            params["rule"] = rule
        if failed_only:
            clauses.append('"ok" = false')
        q = (f'SELECT * FROM "{ALERT_NOTIFICATIONS}" WHERE {" AND ".join(clauses)} GROUP BY "{TAG_RULE}" '
             f'ORDER BY time DESC LIMIT {int(limit)}')
        out = [_row(s.tags.get(TAG_RULE, ""), row) for s in self.client.query(q, params) for row in s.rows()]
        return sorted(out, key=lambda r: r.at_ns, reverse=True)[:limit]


def _row(rule: str, row: dict) -> HistoryRow:
    return HistoryRow(rule, int(row["time"]), {k: v for k, v in row.items() if k != "time"})
