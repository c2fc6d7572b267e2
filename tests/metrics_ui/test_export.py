"""Export routes (Flask test client) against a real InfluxDB."""
from __future__ import annotations

import csv
import io

import pytest

from collector.codec import decode
from metrics_ui.export import CSV_HEADER, neutralise_cell
from collector.query.ranges import format_time

from .conftest import NS


def _csv(client, url):
    r = client.get(url)
    assert r.status_code == 200, r.data
    assert r.mimetype == "text/csv" and "attachment" in r.headers["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(r.data.decode())))
    assert rows[0] == ["value_from_ns", "value_to_ns", "count", "cumulative_percent"]
    return rows[1:]


def test_csv_counts_sum_to_the_events_written(ui_app, ui_data):
    client = ui_app.server.test_client()
    for step in ("sink", "start-to-end", "ingress"):
        rows = _csv(client, f"/export/{ui_data.live_run}/{step}.csv")
        assert sum(int(r[2]) for r in rows) == ui_data.live_totals[step]
        assert float(rows[-1][3]) == pytest.approx(100.0)
        assert all(int(a[1]) < int(b[0]) for a, b in zip(rows, rows[1:]))     # ascending, disjoint
        assert all(int(r[0]) <= int(r[1]) for r in rows)


def test_csv_range_and_filters(ui_app, ui_data, influx_client):
    client = ui_app.server.test_client()
    start = ui_data.live_start_ns
    # 10 intervals by ns, the same by RFC 3339: equal, and what InfluxDB holds for them
    by_ns = _csv(client, f"/export/{ui_data.live_run}/sink.csv?from={start}&to={start + 10 * NS}")
    by_iso = _csv(client, f"/export/{ui_data.live_run}/sink.csv?from={format_time(start)}"
                          f"&to={format_time(start + 10 * NS)}")
    by_unit = _csv(client, f"/export/{ui_data.live_run}/sink.csv?from={start // 1_000_000}ms"
                           f"&to_s={(start + 10 * NS) // NS}")
    assert by_ns == by_iso == by_unit
    expected = influx_client.query(
        'SELECT sum("count") FROM latency WHERE run=$r AND step=\'sink\' AND time >= $a AND time < $b',
        {"r": ui_data.live_run, "a": format_time(start), "b": format_time(start + 10 * NS)})[0].values[0][1]
    assert sum(int(r[2]) for r in by_ns) == expected > 0
    p0 = _csv(client, f"/export/{ui_data.live_run}/sink.csv?worker=host-a/p0&pipeline=orders")
    p1 = _csv(client, f"/export/{ui_data.live_run}/sink.csv?worker=host-a/p1")
    assert 0 < sum(int(r[2]) for r in p0) < sum(int(r[2]) for r in p1) < ui_data.live_totals["sink"]



def test_export_says_how_it_read_the_times(ui_app, ui_data):
    """Epoch seconds are never silently read as ns: a unit is needed, and the answer says what it used."""
    client = ui_app.server.test_client()
    start_s = ui_data.live_start_ns // NS
    r = client.get(f"/export/{ui_data.live_run}/sink.csv?from={start_s}")         # seconds, no unit
    assert r.status_code == 400 and "needs a unit" in r.data.decode()
    r = client.get(f"/export/{ui_data.live_run}/sink.csv?from_s={start_s}&to={ui_data.live_start_ns + 5 * NS}")
    assert r.status_code == 200
    said = r.headers["X-Export-Range"]
    assert f"from {format_time(start_s * NS)} (seconds since the epoch)" in said and "(ns since the epoch)" in said
    r = client.get(f"/export/{ui_data.live_run}/sink.hgrm?from={format_time(ui_data.live_start_ns)}")
    assert "(RFC 3339)" in r.headers["X-Export-Range"] and "(now)" in r.headers["X-Export-Range"]

def test_hgrm_matches_the_merged_histogram(ui_app, ui_data, influx_client):
    r = ui_app.server.test_client().get(f"/export/{ui_data.done_run}/start-to-end.hgrm")
    assert r.status_code == 200
    text = r.data.decode()
    assert text.splitlines()[0].split() == ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    assert f"Total count    = {ui_data.done_totals['start-to-end']:>12d}]" in text
    blobs = influx_client.query('SELECT hdr FROM latency WHERE run=$r AND step=\'start-to-end\'',
                                {"r": ui_data.done_run})[0].values
    hist = decode(blobs[0][1])
    for _, b in blobs[1:]:
        hist.add(decode(b))
    assert f"Max     = {hist.max / 1e3:12.3f}" in text


@pytest.mark.parametrize("url, reason", [
    ("/export/live-1/sink.csv?from=yesterday", "neither RFC 3339"),
    ("/export/live-1/sink.csv?from=2024-13-01T00:00:00Z", "not a valid date"),
    ("/export/live-1/sink.csv?from=99999999999999999999999", "too large"),
    ("/export/live-1/sink.csv?from=20s&to=10s", "'to' must be after 'from'"),
    ("/export/live-1/sink.csv?from=1700000000", "needs a unit"),
    ("/export/live-1/sink.csv?from_s=17e8", "not a number of s"),
    ("/export/live-1/sink.csv?from=5s&from_ms=5000", "give 'from' once"),
    ("/export/live-1/sink.csv?from_ms=5s", "has unit 's' but the parameter says 'ms'"),
    ("/export/live-1/sink.csv?worker=%3Dcmd|calc", "must be names"),
    ("/export/live-1/sink.csv?pipeline=' OR 1=1 --", "may use only letters"),
    ("/export/live-1/sink.csv?limit=5", "unknown parameter 'limit'"),
    ("/export/live-1/sink.csv?from=1&from=2", "more than once"),
    ("/export/live%27--/sink.hgrm", "may use only letters"),
    ("/export/live-1/sink.csv?to=tomorrow", "neither RFC 3339"),
    ("/export/live-1/sink.csv?from=2200-01-01T00:00:00Z", "outside 1970..2100"),
    ("/export/live-1/sink.csv?from=1e9", "neither RFC 3339"),
    ("/export/live-1/sink.csv?worker=" + "w" * 201, "at most 200 are allowed"),
    ("/export/live-1/sink.csv?worker=host%00a", "control character"),
    ("/export/live-1/%3DHYPERLINK(1).csv", "may use only letters"),
    ("/export/live-1%0A/sink.csv", "control character"),                     # a trailing newline
    ("/export/live-1/sink%0A.csv", "control character"),
    ("/export/live-1/sink.csv?pipeline=orders%0A", "control character"),
    ("/export/live-1/sink.csv?worker=host-a/../p0", "looks like a path"),
    ("/export/..%2Elive/sink.csv", "contains '..'"),
    ("/export/live-1/sink.csv?worker=host-a//p0", "must be names"),
])
def test_bad_parameters_get_a_clear_400(ui_app, ui_data, url, reason):
    r = ui_app.server.test_client().get(url)
    assert r.status_code == 400
    assert r.mimetype == "text/plain"
    assert reason in r.data.decode() and "Traceback" not in r.data.decode()


def test_unknown_run_is_a_404_with_a_reason(ui_app, ui_data):
    client = ui_app.server.test_client()
    for url in ("/export/no-such-run/sink.csv", "/export/no-such-run/sink.hgrm"):
        r = client.get(url)
        assert r.status_code == 404 and r.mimetype == "text/plain", url
        assert "no run called 'no-such-run'" in r.data.decode()
    live = ui_data.live_run
    for url, reason in ((f"/export/{live}/no-such-step.csv", "has no step 'no-such-step'; its steps: ingress"),
                        (f"/export/{live}/sink.csv?worker=nobody", "has no worker 'nobody'; its workers: host-a/p0"),
                        (f"/export/{live}/sink.hgrm?pipeline=bids", "has no pipeline 'bids'; its pipelines: "),
                        (f"/export/{live}/sink.json", "exports are /export/<run>/<step>.{csv,hgrm}"),
                        (f"/export/{live}/sink", "exports are")):
        r = client.get(url)
        assert r.status_code == 404 and r.mimetype == "text/plain", url
        assert reason in r.data.decode(), (url, r.data)


def test_unreachable_influxdb_is_a_503(tmp_path):
    from collector.influx import InfluxConfig
    from metrics_ui.app import UiConfig, create_app
    app = create_app(UiConfig(influx=InfluxConfig(url="http://127.0.0.1:9", db="x", timeout=2.0)))
    r = app.server.test_client().get("/export/r/sink.csv")
    assert r.status_code == 503 and "unreachable" in r.data.decode()


def test_formula_cells_are_neutralised():
    assert neutralise_cell("=HYPERLINK(\"x\")") == "'=HYPERLINK(\"x\")"
    assert neutralise_cell("+1") == "'+1" and neutralise_cell("@SUM(A1)") == "'@SUM(A1)"
    assert neutralise_cell("-2+3") == "'-2+3" and neutralise_cell("\t=1") == "'\t=1"
    assert neutralise_cell("\r=1") == "'\r=1"
    assert neutralise_cell(5) == 5 and neutralise_cell("12.5") == "12.5"


def test_every_csv_cell_is_a_number_or_neutralised(ui_app, ui_data):
    import csv
    import io
    r = ui_app.server.test_client().get(f"/export/{ui_data.done_run}/sink.csv?worker=host-a/p0&pipeline=nbbo")
    assert r.status_code == 200
    rows = list(csv.reader(io.StringIO(r.data.decode())))
    assert rows[0] == ["value_from_ns", "value_to_ns", "count", "cumulative_percent"] and len(rows) > 10
    for row in rows[1:]:
        for cell in row:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), row
            float(cell)
