"""A run's address and the links between one query's runs: the run's page, its step pages, the compare page.

A run's page is `/run/<job>?run=<Spark's runId>` (Spark's UI names a run by its runId too);
`/run/<job>` alone opens the job's newest run. The run page's head says which run it shows
and lists the runs of its query, newest first, each one click away, with a link comparing
the shown run with the one before it.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Mapping, Sequence
from urllib.parse import quote, urlencode

from dash import dcc, html

from collector.query.ranges import check_name
from collector.query.run_groups import display_name, short_id
from collector.query.series import RunInfo

JOB_RUN_ID = "job-run-id"             # the Spark run id the page shows (None: the job's newest)
JOB_QUERY_RUNS = "job-query-runs"     # the list of the query's runs
#: Runs of one query the run page lists (the newest); the runs page lists them all.
LISTED_RUNS = 20


def run_url(job: str, run_id: str | None = None, page: str = "run") -> str:
    """Return the address of a run's page (the job's newest run without a run id)."""
    url = f"/{page}/{quote(job, safe='')}"
    return url + ("?" + urlencode({"run": run_id}) if run_id else "")


def step_url(job: str, step: str, run_id: str | None = None) -> str:
    """Return the address of a step's page of one run."""
    url = f"/step/{quote(job, safe='')}/{quote(step, safe='')}"
    return url + ("?" + urlencode({"run": run_id}) if run_id else "")


def compare_url(runs: Sequence[RunInfo]) -> str:
    """Return the compare page's address for query runs (the first is the baseline)."""
    return "/compare?" + urlencode({"query_runs": ",".join(f"{r.run}:{r.run_id}" for r in runs if r.run_id)})


def asked_run_id(query: Mapping[str, object]) -> tuple[str | None, str | None]:
    """Return the run id of a page's address (`?run=`) and what was wrong with it (then ignored)."""
    raw = query.get("run")
    if raw is None or raw == "":
        return None, None
    try:
        return check_name(raw, "run id in the address"), None
    except ValueError as e:
        return None, str(e)


def _start(r: RunInfo) -> str:
    return datetime.fromtimestamp(r.first_ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def query_runs_panel(shown: RunInfo | None, runs: Sequence[RunInfo]) -> list:
    """Return the run page's head lines: the run shown (its query, query id and run id) and its query's runs."""
    if shown is None or shown.run_id is None:
        return []
    items = []
    for r in list(runs)[:LISTED_RUNS]:
        label = f"{_start(r)} · {r.status} · {short_id(r.run_id)}"
        items.append(html.Li(html.Strong(label, className="run-shown") if r.run_id == shown.run_id else
                             dcc.Link(label, href=run_url(r.run, r.run_id), title=r.run_id or "")))
    older = [r for r in runs if r.first_ns < shown.first_ns]
    head = [html.P([f"query {display_name(shown)} · query id ", html.Code(shown.query_id or "—"), " · run id ",
                    html.Code(shown.run_id, id=JOB_RUN_ID + "-shown")], className="summary")]
    if len(runs) > 1:
        head.append(html.Div([html.Span(f"Runs of this query ({len(runs)}), newest first:"),
                              html.Ul(items, className="query-runs"),
                              dcc.Link("compare with the run before", href=compare_url([older[0], shown]),
                                       id=JOB_QUERY_RUNS + "-compare") if older else None],
                             className="query-runs-box"))
    if len(runs) > LISTED_RUNS:
        head.append(dcc.Link(f"all {len(runs)} runs", href="/", className="note"))
    return head


def no_such_run(job: str, run_id: str) -> str:
    """Return what a page says for a run id its job never had."""
    return f"job {job!r} has no run {run_id!r}: its newest run is shown at {run_url(job)}"
