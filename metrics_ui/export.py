"""Stable download routes for a step's histogram over a range.

    GET /export/<run>/<step>.csv    one row per non-empty bucket:
                                    value_from_ns, value_to_ns, count, cumulative_percent
    GET /export/<run>/<step>.hgrm   HdrHistogram percentile distribution text (values in µs)

Optional query parameters: `run` (Spark's run id: that run's points only, as its page shows them),
`from`, `to` (RFC 3339, or epoch numbers with a unit: a suffix
`1700000000s`/`ms`/`us`/`ns`, or `from_s`, `from_ms`, `to_s`, `to_ms`; a bare number must be
ns-sized; default the whole run, `to` defaults to now), `worker`, `pipeline`. The
`X-Export-Range` header says the range used and how each time was read. Every parameter is
validated (names by `collector.names`); a bad one gets a 400 with a plain-text reason; a run,
step, pipeline or worker with no data, or another format, a 404 naming what exists; an
unreachable InfluxDB a 503; never a traceback.
The counts of the CSV sum to the events of the step in the range.
"""
from __future__ import annotations

import csv
import io
import time
from urllib.parse import quote, urlencode

from flask import Blueprint, Response, current_app, request

from collector.codec import to_hgrm
from collector.influx import InfluxError

from collector.query.run_scope import RunScope
from collector.query.store import MetricsStore
from collector.query.ranges import ParsedTime, TimeRange, check_name, check_worker, format_time, read_time

bp = Blueprint("metrics_ui_export", __name__)
EXTENSION = "metrics_ui"                 # key of the MetricsStore in app.extensions
FORMATS = ("csv", "hgrm")
TIME_PARAMS = {f"{edge}{unit}": (edge, unit.lstrip("_") or None)
               for edge in ("from", "to") for unit in ("", "_s", "_ms", "_us", "_ns")}
ALLOWED_PARAMS = set(TIME_PARAMS) | {"worker", "pipeline", "run"}
CSV_HEADER = ("value_from_ns", "value_to_ns", "count", "cumulative_percent")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: object) -> object:
    """Return a CSV cell a spreadsheet will not run as a formula (text cells get a leading ')."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def export_url(run: str, step: str, fmt: str, rng: TimeRange | None = None, worker: str | None = None,
               pipeline: str | None = None, run_id: str | None = None) -> str:
    """Return the export route's URL for a job, step and optional range, filters and Spark run."""
    params: dict[str, str] = {}
    if run_id:
        params["run"] = run_id
    if rng is not None:
        params.update({"from": f"{rng.start_ns}ns", "to": f"{rng.end_ns}ns"})
    if worker:
        params["worker"] = worker
    if pipeline:
        params["pipeline"] = pipeline
    url = f"/export/{quote(run, safe='')}/{quote(step, safe='')}.{fmt}"
    return url + ("?" + urlencode(params) if params else "")


def _bad(message: str, status: int = 400) -> Response:
    return Response(message + "\n", status=status, mimetype="text/plain")


def _edge(edge: str) -> ParsedTime | None:
    """Return the time given for `from` or `to` (in any of its spellings), None if not given."""
    given = [(key, unit) for key, (e, unit) in TIME_PARAMS.items() if e == edge and request.args.get(key)]
    if len(given) > 1:
        raise ValueError(f"give '{edge}' once, not as {' and '.join(k for k, _ in given)}")
    if not given:
        return None
    key, unit = given[0]
    try:
        return read_time(request.args[key], unit)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None


def _parse(run: str, step: str):
    """Return (run, step, range, worker, pipeline, how the times were read) or raise ValueError."""
    unknown = sorted(set(request.args) - ALLOWED_PARAMS)
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0][:40]!r}; allowed: from, to (or from_s, from_ms, "
                         "to_s, to_ms, ...), worker, pipeline, run")
    for key in request.args:
        if len(request.args.getlist(key)) > 1:
            raise ValueError(f"parameter {key!r} given more than once")
    check_name(run, "run")
    check_name(step, "step")
    worker = request.args.get("worker") or None
    pipeline = request.args.get("pipeline") or None
    if worker is not None:
        check_worker(worker)
    if pipeline is not None:
        check_name(pipeline, "pipeline")
    run_id = request.args.get("run") or None
    if run_id is not None:
        check_name(run_id, "run id")
    start, end = _edge("from"), _edge("to")
    rng = TimeRange(start.ns if start else 0, end.ns if end else time.time_ns() + 1)
    if rng.end_ns <= rng.start_ns:
        raise ValueError("'to' must be after 'from'")
    said = (f"from {format_time(rng.start_ns)} ({start.read_as if start else 'the beginning'}) "
            f"to {format_time(rng.end_ns)} ({end.read_as if end else 'now'})")
    return run, step, rng, worker, pipeline, run_id, said


def _missing(store: MetricsStore, run: str, step: str, worker: str | None, pipeline: str | None) -> str | None:
    """Return why there is nothing to export (an unknown run, step, pipeline or worker), None if all exist."""
    if store.run(run, time.time_ns()) is None:
        return f"no run called {run!r}"
    steps = store.steps(run)
    if step not in steps:
        return f"run {run!r} has no step {step!r}; its steps: {', '.join(steps)}"
    pipelines, workers = store.step_filters(run, step)
    if pipeline is not None and pipeline not in pipelines:
        return f"step {step!r} of run {run!r} has no pipeline {pipeline!r}; its pipelines: {', '.join(pipelines)}"
    if worker is not None and worker not in workers:
        return f"step {step!r} of run {run!r} has no worker {worker!r}; its workers: {', '.join(workers)}"
    return None


def _histogram(run: str, step: str):
    try:
        run, step, rng, worker, pipeline, run_id, said = _parse(run, step)
    except ValueError as e:
        return None, None, _bad(f"bad request: {e}")
    store: MetricsStore = current_app.extensions[EXTENSION]
    try:
        scope: RunScope | str = run
        if run_id is not None:
            info = store.run(run, time.time_ns(), run_id)
            if info is None:
                return None, None, _bad(f"not found: job {run!r} has no run {run_id!r}", 404)
            scope = info.scope
            said += f", run {run_id}"
        hist = store.step_histogram(scope, step, rng, pipeline=pipeline, worker=worker)
        if hist.total_count == 0:
            why = _missing(store, run, step, worker, pipeline)
            if why:
                return None, None, _bad(f"not found: {why}", 404)
        return hist, said, None
    except InfluxError:
        return None, None, _bad(f"InfluxDB at {store.client.url} is unreachable or failed; try again", 503)


def _filename(run: str, step: str, ext: str) -> str:
    safe = lambda s: "".join(c if c.isalnum() or c in "-_." else "_" for c in s)  # noqa: E731
    return f"{safe(run)}_{safe(step)}.{ext}"


@bp.get("/export/<run>/<step>.csv")
def export_csv(run: str, step: str) -> Response:
    """Download a step's histogram over a range as CSV, one row per bucket."""
    hist, said, error = _histogram(run, step)
    if error is not None:
        return error
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    total, cumulative = hist.total_count, 0
    for b in hist.iter_buckets():
        cumulative += b.count
        writer.writerow([neutralise_cell(v) for v in
                         (b.value_from_ns, b.value_to_ns, b.count, f"{100.0 * cumulative / total:.6f}")])
    return Response(out.getvalue(), mimetype="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{_filename(run, step, "csv")}"',
                             "X-Export-Range": said})


@bp.get("/export/<run>/<step>.hgrm")
def export_hgrm(run: str, step: str) -> Response:
    """Download a step's histogram over a range as an HdrHistogram .hgrm text (µs)."""
    hist, said, error = _histogram(run, step)
    if error is not None:
        return error
    return Response(to_hgrm(hist, value_unit_ratio=1e3), mimetype="text/plain",
                    headers={"Content-Disposition": f'attachment; filename="{_filename(run, step, "hgrm")}"',
                             "X-Export-Range": said})


@bp.get("/export/<path:rest>")
def export_other(rest: str) -> Response:
    """Anything else under /export/ is not found (rather than the app's page with a 200)."""
    return _bad(f"not found: exports are /export/<run>/<step>.{{{','.join(FORMATS)}}}", 404)
