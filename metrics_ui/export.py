"""Stable download routes for a step's histogram over a range.

    GET /export/<run>/<step>.csv    one row per non-empty bucket:
                                    value_from_ns, value_to_ns, count, cumulative_percent
    GET /export/<run>/<step>.hgrm   HdrHistogram percentile distribution text (values in µs)

Optional query parameters: `from`, `to` (ns since the epoch or RFC 3339; default the whole
run, `to` defaults to now), `worker`, `pipeline`. Every parameter is validated (names by
`collector.names`); a bad one gets a 400 with a plain-text reason, a run InfluxDB has no
data of a 404, an unreachable InfluxDB a 503, never a traceback.
The counts of the CSV sum to the events of the step in the range.
"""
from __future__ import annotations

import csv
import io
import time

from flask import Blueprint, Response, current_app, request

from collector.codec import to_hgrm
from collector.influx import InfluxError

from .data import MetricsStore
from .ranges import TimeRange, check_name, check_worker, parse_time

bp = Blueprint("metrics_ui_export", __name__)
EXTENSION = "metrics_ui"                 # key of the MetricsStore in app.extensions
ALLOWED_PARAMS = {"from", "to", "worker", "pipeline"}
CSV_HEADER = ("value_from_ns", "value_to_ns", "count", "cumulative_percent")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def neutralise_cell(value: object) -> object:
    """Return a CSV cell a spreadsheet will not run as a formula (text cells get a leading ')."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def export_url(run: str, step: str, fmt: str, rng: TimeRange | None = None, worker: str | None = None,
               pipeline: str | None = None) -> str:
    """Return the export route's URL for a run, step and optional range and filters."""
    from urllib.parse import quote, urlencode
    params: dict[str, str] = {}
    if rng is not None:
        params.update({"from": str(rng.start_ns), "to": str(rng.end_ns)})
    if worker:
        params["worker"] = worker
    if pipeline:
        params["pipeline"] = pipeline
    url = f"/export/{quote(run, safe='')}/{quote(step, safe='')}.{fmt}"
    return url + ("?" + urlencode(params) if params else "")


def _bad(message: str, status: int = 400) -> Response:
    return Response(message + "\n", status=status, mimetype="text/plain")


def _parse(run: str, step: str):
    """Return (run, step, range, worker, pipeline) or raise ValueError with the reason."""
    unknown = sorted(set(request.args) - ALLOWED_PARAMS)
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0][:40]!r}; allowed: from, to, worker, pipeline")
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
    start = parse_time(request.args["from"]) if request.args.get("from") else 0
    end = parse_time(request.args["to"]) if request.args.get("to") else time.time_ns() + 1
    if end <= start:
        raise ValueError("'to' must be after 'from'")
    return run, step, TimeRange(start, end), worker, pipeline


def _histogram(run: str, step: str):
    try:
        run, step, rng, worker, pipeline = _parse(run, step)
    except ValueError as e:
        return None, _bad(f"bad request: {e}")
    store: MetricsStore = current_app.extensions[EXTENSION]
    try:
        hist = store.step_histogram(run, step, rng, pipeline=pipeline, worker=worker)
        if hist.total_count == 0 and store.run(run, time.time_ns()) is None:
            return None, _bad(f"not found: no run called {run!r}", 404)
        return hist, None
    except InfluxError:
        return None, _bad(f"InfluxDB at {store.client.url} is unreachable or failed; try again", 503)


def _filename(run: str, step: str, ext: str) -> str:
    safe = lambda s: "".join(c if c.isalnum() or c in "-_." else "_" for c in s)  # noqa: E731
    return f"{safe(run)}_{safe(step)}.{ext}"


@bp.get("/export/<run>/<step>.csv")
def export_csv(run: str, step: str) -> Response:
    """Download a step's histogram over a range as CSV, one row per bucket."""
    hist, error = _histogram(run, step)
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
                    headers={"Content-Disposition": f'attachment; filename="{_filename(run, step, "csv")}"'})


@bp.get("/export/<run>/<step>.hgrm")
def export_hgrm(run: str, step: str) -> Response:
    """Download a step's histogram over a range as an HdrHistogram .hgrm text (µs)."""
    hist, error = _histogram(run, step)
    if error is not None:
        return error
    return Response(to_hgrm(hist, value_unit_ratio=1e3), mimetype="text/plain",
                    headers={"Content-Disposition": f'attachment; filename="{_filename(run, step, "hgrm")}"'})
