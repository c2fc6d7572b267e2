"""Runs grouped by their query, and the run a page shows (pure, no I/O).

A query is Spark's query id: its runs (one per start, Spark's runId) are listed together,
newest first, and the groups by their newest run. Two queries never merge, even when their
names sanitise to one job (`coll/a`, `coll_a`) or both are unnamed in one application. A
job with latency points and no query runs is a group of its own, as it always was.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from collector.names import to_name
from collector.query.series import RunInfo

#: Characters of an id the pages show (a UUID's first group); the whole id is its tooltip.
SHORT_ID_CHARS = 8


@dataclass(frozen=True)
class QueryGroup:
    """One query's runs as the runs page lists them, newest first."""
    key: str                          # the query id, or `job:<job>` for a job with no query id
    name: str                         # the query's name; an unnamed one's job (its application) and short id
    job: str
    query_id: str | None
    runs: tuple[RunInfo, ...]

    @property
    def newest(self) -> RunInfo:
        """Return the group's newest run."""
        return self.runs[0]


def short_id(text: str | None) -> str:
    """Return an id's first characters, as the pages show it ("" for none)."""
    return (text or "")[:SHORT_ID_CHARS]


def query_key(r: RunInfo) -> str:
    """Return what groups a run with its query's other runs: the query id, else its job and query tag."""
    return r.query_id if r.query_id else f"job:{r.run}:{r.query or ''}"


def display_name(r: RunInfo) -> str:
    """Return a run's query as the pages name it: its name (`coll/a`); unnamed (its tag is its id), its job (the
    application's name, or the monitor's `run`) and short id; a query whose job is not its name (Market Spread's
    runs, named by their run), its job."""
    if r.query and r.query_id and r.query == r.query_id:
        return f"{r.run} · {short_id(r.query_id)}"
    return r.query if r.query and to_name(r.query, r.run) == r.run else r.run


def _newest_first(r: RunInfo) -> tuple[int, int]:
    return (-r.last_ns, -r.first_ns)


def group_runs(runs: Sequence[RunInfo]) -> list[QueryGroup]:
    """Return the runs grouped by query: runs newest first, groups by their newest run."""
    groups: dict[str, list[RunInfo]] = {}
    for r in runs:
        groups.setdefault(query_key(r), []).append(r)
    out = []
    for key, members in groups.items():
        members.sort(key=_newest_first)
        out.append(QueryGroup(key, display_name(members[0]), members[0].run, members[0].query_id, tuple(members)))
    return sorted(out, key=lambda g: (_newest_first(g.newest), g.key))


def pick_run(runs: Sequence[RunInfo], run_id: str | None) -> RunInfo | None:
    """Return the run a page shows: Spark's run `run_id` (None: not among them), or the newest without one."""
    if run_id:
        return next((r for r in runs if r.run_id == run_id), None)
    return min(runs, key=_newest_first) if runs else None


def query_runs(runs: Sequence[RunInfo], run: RunInfo) -> list[RunInfo]:
    """Return the runs of `run`'s query, newest first (`run` among them)."""
    key = query_key(run)
    return sorted((r for r in runs if query_key(r) == key), key=_newest_first)
