"""Which points are one run's: a run as Spark defines it, one start of a query (pure, no I/O).

A *query* is Spark's query id (stable across restarts from one checkpoint); a *run* is one
start of it (Spark's runId). The listener tags every point of a run with both (`query_id`,
`run_id`; `runs` rows with `run_id` alone). Points without the tag (written before it
existed, latency intervals, the ingress, Market Spread's own steps) belong to a run by its
job (`run` tag) and its time span. `where` is the InfluxQL filter of both, its values bound.
"""
from __future__ import annotations

from dataclasses import dataclass

from collector.query.ranges import format_time
from collector.units import NS
from collector.vocabulary import TAG_QUERY, TAG_RUN, TAG_RUN_ID

#: How far past a run's recorded end its untagged points are still its own: the job writes its
#: last status figures (the backlog drained, the ingress' final counters) a few seconds after.
END_GRACE_NS = 15 * NS


@dataclass(frozen=True)
class RunScope:
    """One run's points: its job's, tagged with its run id or untagged within its span.

    `run_id` None: every point of the job (a run with latency points only, as Market
    Spread's latency-only runs and data from before `runs` rows). `end_ns`: the exclusive
    end of its span, a recorded end's grace included (`span_end`); None: open (a live run).
    """
    job: str
    run_id: str | None = None
    query: str | None = None
    start_ns: int | None = None
    end_ns: int | None = None

    @property
    def key(self) -> str:
        """Return a text naming the scope (caches, chart revisions)."""
        return self.job if self.run_id is None else f"{self.job}|{self.run_id}"

    def where(self, prefix: str = "") -> tuple[str, dict[str, str]]:
        """Return the InfluxQL filter of the run's points and its bound values (`prefix` keeps names apart)."""
        p = prefix
        clauses, params = [f'"{TAG_RUN}" = ${p}run'], {f"{p}run": self.job}
        if self.run_id is None:
            return " AND ".join(clauses), params
        clauses.append(f'("{TAG_RUN_ID}" = ${p}run_id OR "{TAG_RUN_ID}" = \'\')')
        params[f"{p}run_id"] = self.run_id
        if self.query:
            clauses.append(f'("{TAG_QUERY}" = ${p}query OR "{TAG_QUERY}" = \'\')')
            params[f"{p}query"] = self.query
        if self.start_ns is not None:
            clauses.append(f"time >= ${p}run_start")
            params[f"{p}run_start"] = format_time(self.start_ns)
        if self.end_ns is not None:
            clauses.append(f"time < ${p}run_end")
            params[f"{p}run_end"] = format_time(self.end_ns)
        return " AND ".join(clauses), params


def scope_of(run: "str | RunScope") -> RunScope:
    """Return a run scope for a job name (every point of the job) or the scope itself."""
    return run if isinstance(run, RunScope) else RunScope(run)


def span_end(ended_ns: int | None, next_start_ns: int | None) -> int | None:
    """Return where a run's span ends: its recorded end and a grace, cut at its query's next start (None: open)."""
    ends = [t for t in (ended_ns + END_GRACE_NS if ended_ns is not None else None, next_start_ns) if t is not None]
    return min(ends) if ends else None
