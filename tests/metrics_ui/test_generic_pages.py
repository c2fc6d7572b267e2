"""Any monitored streaming query's runs and job pages in a real headless Chromium against a real InfluxDB."""
from __future__ import annotations

import time

import numpy as np

from collector.aggregate import IntervalHistogram
from collector.backpressure import BackpressureFigures, backpressure_point
from collector.histogram import LatencyHistogram
from collector.influx.lineproto import Point
from collector.points import latency_point
from collector.influx.server import free_port
from collector.units import NS

from ..collector.query.generic_run import APP, EXECUTORS, OPERATORS, SOURCES, STEPS, generic_run
from .test_pages import TIMEOUT, _wait_traces

HOSTILE = "<script>window.__pwned=1</script>\"'/../x"


def _rows(dash_duo, table: str) -> list[list[str]]:
    """Return a table's body cells as the browser shows them, read at once (a live refresh re-renders it)."""
    return dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'),"
        "  tr => Array.from(tr.querySelectorAll('td'), td => td.innerText.trim()));", table)


def _names(dash_duo, graph: str) -> list[str]:
    """Return the names of a drawn chart's series (once it has data)."""
    _wait_traces(dash_duo, graph)
    return dash_duo.driver.execute_script(
        "return document.querySelector(arguments[0] + ' .js-plotly-plot').data.map(t => t.name);", "#" + graph)


def _row(dash_duo, table: str, first: str) -> list[str]:
    dash_duo._wait_for(lambda _d: any(r and r[0] == first for r in _rows(dash_duo, table)), timeout=TIMEOUT,
                       msg=f"no row {first!r} in {table}")
    return next(r for r in _rows(dash_duo, table) if r and r[0] == first)


def test_runs_and_job_pages_follow_any_query(dash_duo, ui_app, influx_client):
    now = time.time_ns() // NS * NS
    g = generic_run("orders", now - 29 * NS)
    influx_client.write(g.points)
    dash_duo.start_server(ui_app, port=free_port())

    # runs page: listed by name with its query id; throughput is its last minute's rows over its length (rows/s)
    row = _row(dash_duo, "#runs-table", "orders")
    assert row[1] == "live" and row[4] == f"{g.input_rows:,}", row
    rate = float(row[5].removesuffix(" rows/s").replace(",", ""))
    assert abs(rate - g.last_minute_rate()) <= 0.01 * g.last_minute_rate() and row[5].endswith("rows/s"), row
    assert row[6].endswith("sink") and row[6][0].isdigit(), row                  # p99 of the last declared step
    assert row[8].startswith(g.query_id[:8] + " / "), row

    # job page: its run id, its steps in the declared order, sources, batches, state and executors drawn
    dash_duo.find_element("#runs-table a[href^='/run/orders?run=']").click()
    dash_duo.wait_for_contains_text("#job-summary", f"query {g.query_id}", timeout=TIMEOUT)
    assert dash_duo.driver.title == "Run · Spark streaming monitor"
    assert dash_duo.find_element("#job-run-id-shown").text == "sr-3"                  # Spark's runId
    dash_duo._wait_for(lambda _d: [r[0] for r in _rows(dash_duo, "#job-steps-table")] == list(STEPS),
                       timeout=TIMEOUT, msg="steps not in the declared order")
    assert not dash_duo.find_element("#job-bp-box").is_displayed()      # no backpressure written: no empty panel
    src = _row(dash_duo, "#job-sources-table", SOURCES[0])
    assert src[4] == "129" and _row(dash_duo, "#job-sources-table", SOURCES[1])[5] == "3", src
    dash_duo.wait_for_contains_text("#job-query-batches-summary", f"{g.overran:,} took longer than the 1,000 ms trigger",
                                    timeout=TIMEOUT)
    op = _row(dash_duo, "#job-state-table", OPERATORS[1])
    assert op[1] == "2,029" and op[3] == f"{g.late_rows[OPERATORS[1]]:,}", op
    dash_duo.wait_for_contains_text("#job-executors-summary", APP, timeout=TIMEOUT)
    assert [r[0] for r in _rows(dash_duo, "#job-executors-table")] == list(EXECUTORS)
    # what a Spark user checks first is drawn at once, above the steps: batch duration against the trigger,
    # input rows per batch, input rate against processing rate with the rows behind
    assert len(_wait_traces(dash_duo, "job-query-batches-duration")) == 4
    assert _names(dash_duo, "job-query-batches-input") == ["rows per batch", "rows per batch (largest)"]
    assert len(_wait_traces(dash_duo, "job-sources-rates")) == 6
    assert dash_duo.driver.execute_script(
        "const ids = [...document.querySelectorAll('.dash-graph')].map(g => g.id);"
        "return ids.indexOf('job-sources-rates') < ids.indexOf('job-throughput');")
    assert not dash_duo.find_elements("#job-state-rows") and not dash_duo.find_elements("#job-bp-busy")
    for row in ("state", "executors"):
        dash_duo.find_element(f"#job-{row}-toggle").click()
    dash_duo._wait_for(lambda d: d.current_url.endswith("&open=batches%2Csources%2Cstate%2Cexecutors"),
                       timeout=TIMEOUT, msg="the address does not name the open rows")
    for graph, traces in (("job-sources-rates", 6), ("job-query-batches-duration", 4), ("job-state-rows", 3),
                          ("job-state-memory", 2), ("job-state-late", 2), ("job-executors-heap", 6),
                          ("job-executors-gc", 6), ("job-throughput", 1), ("job-percentiles", 3)):
        assert len(_wait_traces(dash_duo, graph)) == traces, graph
    late = dict(zip(_names(dash_duo, "job-state-late"), (sum(t["y"]) for t in _wait_traces(dash_duo, "job-state-late"))))
    assert late == {op: g.late_rows[op] for op in OPERATORS}                   # rows dropped by the watermark
    assert not dash_duo.find_element("#job-ingress").is_displayed()            # Market Spread's ingress: none here

    # drawing the sections' charts leaves the range as it was; a zoom of one of them makes it the page's range
    assert not dash_duo.find_element("#job-range input[value='custom']").is_selected()
    lo, hi = (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((g.start_ns + k * NS) / NS)) for k in (5, 20))
    # the sections' charts stay mounted across live ticks (1 s here): a zoom or legend click is never dropped
    mark = "const e = document.querySelector('#job-executors-heap .js-plotly-plot');"
    dash_duo.driver.execute_script(mark + "e.__mounted = true;")
    time.sleep(3)
    assert dash_duo.driver.execute_script(mark + "return e.__mounted === true;"), "a live tick re-mounted the chart"
    dash_duo.driver.execute_script(
        "const gd = document.querySelector('#job-executors-heap .js-plotly-plot');"
        "Plotly.relayout(gd, {'xaxis.range[0]': arguments[0], 'xaxis.range[1]': arguments[1]});", lo, hi)
    dash_duo._wait_for(lambda d: dash_duo.find_element("#job-range input[value='custom']").is_selected(),
                       timeout=TIMEOUT, msg="the zoom did not become the page's range")
    dash_duo._wait_for(lambda d: "range=custom" in d.current_url and "open=batches%2Csources" in d.current_url,
                       timeout=TIMEOUT, msg="the range and the open rows are not both in the address")
    # folding a row unmounts its charts; the address, loaded again, opens the rows it names
    dash_duo.find_element("#job-sources-toggle").click()
    dash_duo._wait_for(lambda d: not dash_duo.find_elements("#job-sources-rates"), timeout=TIMEOUT,
                       msg="a folded row kept its charts")
    dash_duo.driver.get(dash_duo.driver.current_url)
    assert len(_wait_traces(dash_duo, "job-executors-heap")) == 6
    assert not dash_duo.find_elements("#job-sources-rates")
    assert dash_duo.get_logs() == []


def test_a_query_without_steps_state_or_executors_shows_nothing_empty(dash_duo, ui_app, influx_client):
    now = time.time_ns() // NS * NS
    g = generic_run("plain", now - 9 * NS, seconds=10, steps=(), operators=(), app="local-none", latency=False)
    influx_client.write([p for p in g.points if p.measurement != "spark_executor"])
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/plain")
    dash_duo.wait_for_contains_text("#job-sources-table", SOURCES[1], timeout=TIMEOUT)
    # no steps: no empty latency charts or tables, but what Spark reports instead, drawn without a click
    assert _wait_traces(dash_duo, "job-sources-rates") and _wait_traces(dash_duo, "job-query-batches-duration")
    assert _wait_traces(dash_duo, "job-query-batches-input")
    # the state section holds the watermark's delay alone: no empty memory or dropped-rows chart
    dash_duo.find_element("#job-state-toggle").click()
    assert _names(dash_duo, "job-state-rows") == ["watermark delay"]
    assert not dash_duo.find_element("#job-state-memory").is_displayed()
    assert not dash_duo.find_element("#job-state-late").is_displayed()
    for part in ("#job-latency", "#job-steps-box", "#job-step-tables", "#job-bp-box", "#job-executors", "#job-ingress"):
        assert not dash_duo.find_element(part).is_displayed(), part
    text = dash_duo.find_element("body").text
    for said in ("no latency steps", "not reported", "Pipelines", "Workers", "no data"):
        assert said not in text, said
    assert dash_duo.get_logs() == []


def test_hostile_run_and_source_names_render_as_text(dash_duo, ui_app, influx_client):
    now = time.time_ns() // NS * NS
    g = generic_run("safe", now - 9 * NS, seconds=10, sources=(f"0:{HOSTILE}",), operators=(f"0:{HOSTILE}",),
                    latency=False)
    bad = generic_run(HOSTILE, now - 9 * NS, seconds=10, latency=False)
    influx_client.write(g.points + [p for p in bad.points if p.measurement in ("runs", "spark_progress")]
                        + [Point("backpressure", {"run": HOSTILE, "step": "job"}, {"status": "OK"}, now)])
    dash_duo.start_server(ui_app, port=free_port())
    assert _row(dash_duo, "#runs-table", HOSTILE)[1] == "live"
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/safe")
    assert _row(dash_duo, "#job-sources-table", f"0:{HOSTILE}")
    assert _row(dash_duo, "#job-state-table", f"0:{HOSTILE}")
    assert dash_duo.driver.execute_script("return window.__pwned === undefined")
    assert not dash_duo.find_elements("#job-sources-table script") and not dash_duo.find_elements("#runs-table script")
    assert dash_duo.get_logs() == []


def test_step_page_bins_reach_minutes_for_spark_scale_latencies(dash_duo, ui_app, influx_client):
    now = time.time_ns() // NS * NS
    g = generic_run("late", now - 9 * NS, seconds=10, steps=("sink",), latency=False)
    seconds = np.array([0.5, 2, 10, 10, 40, 50, 50, 50], dtype=float)      # event-time latencies of a Spark job
    hist = LatencyHistogram.from_values((seconds * NS).astype(np.int64))
    influx_client.write(g.points + [latency_point(IntervalHistogram("late", "late", "sink", "host-a/p0", now - 5 * NS,
                                                                    NS, hist))])
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/step/late/sink")
    bars = _wait_traces(dash_duo, "step-bins")[0]
    assert bars["x"][-5:] == ["≤ 1 s", "≤ 4 s", "≤ 16 s", "≤ 1 min", "> 1 min"], bars["x"]
    assert [round(y, 1) for y in bars["y"][-5:]] == [12.5, 12.5, 25.0, 50.0, 0.0], bars["y"]
    assert dash_duo.driver.title == "Step · Spark streaming monitor"
    assert dash_duo.get_logs() == []


def test_a_querys_job_backpressure_opens_with_its_busy_share_and_no_empty_backlog_chart(dash_duo, ui_app,
                                                                                         influx_client):
    now = time.time_ns() // NS * NS
    g = generic_run("busy", now - 9 * NS, seconds=10)
    figures = BackpressureFigures(0.6, None, 0.4, None, None, "LOW")       # what the monitor writes: no backlog
    busy = [backpressure_point("busy", "job", figures, now - k * NS) for k in range(1, 8)]
    for p in busy:
        p.tags["run_id"] = "sr-3"                       # the listener tags its points with Spark's runId
    influx_client.write(g.points + busy)
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/busy")
    assert _names(dash_duo, "job-bp-busy") == ["job busy"]            # open at first: the run has steps
    assert not dash_duo.find_element("#job-bp-backlog").is_displayed()
    assert "no data" not in dash_duo.find_element("body").text
    assert dash_duo.get_logs() == []
