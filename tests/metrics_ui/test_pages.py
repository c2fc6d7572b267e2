"""The dashboard in a real headless Chromium against a real InfluxDB (dash_duo)."""
from __future__ import annotations

import time

import numpy as np
from selenium.webdriver.common.keys import Keys

from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx import InfluxConfig
from collector.influx.server import free_port
from collector.points import latency_point
from metrics_ui.app import UiConfig, create_app

from .conftest import NS

TIMEOUT = 10


def _trace_data(dash_duo, graph_id: str) -> list[dict]:
    """Return the plotted traces (x, y) of a dcc.Graph as the browser holds them."""
    return dash_duo.driver.execute_script(
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return gd && gd._fullData ? gd._fullData.filter(t => t.visible !== false)"
        "  .map(t => ({x: Array.from(t.x || []), y: Array.from(t.y || [])})) : [];",
        graph_id)


def _wait_traces(dash_duo, graph_id: str) -> list[dict]:
    dash_duo.wait_for_element(f"#{graph_id} .js-plotly-plot", timeout=TIMEOUT)
    dash_duo._wait_for(lambda _driver: any(t["y"] for t in _trace_data(dash_duo, graph_id)), timeout=TIMEOUT,
                       msg=f"{graph_id} has no data")
    return _trace_data(dash_duo, graph_id)


def _fits_window(dash_duo, table: str, width: int = 1280) -> None:
    """Wait until `table` fits a `width`-px window: no sideways scroll, its last header inside the view."""
    dash_duo.driver.set_window_size(width, 900)
    script = ("const th = document.querySelector(arguments[0] + ' thead th:last-child');"
              "const root = document.documentElement;"
              "return th ? [th.getBoundingClientRect().right, root.clientWidth, root.scrollWidth] : null;")
    dash_duo._wait_for(lambda d: (m := d.execute_script(script, table)) and m[0] <= m[1] and m[2] <= m[1],
                       timeout=TIMEOUT, msg=f"{table} is wider than a {width}-px window: "
                                            f"{dash_duo.driver.execute_script(script, table)}")


def _legend_clear(dash_duo, graph_id: str) -> None:
    """Wait until a chart's legend lies wholly below its plot area, tick labels and x-axis title."""
    script = ("const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
              "const box = s => gd.querySelector(s) && gd.querySelector(s).getBoundingClientRect();"
              "const legend = box('.legend'), plot = box('.nsewdrag');"
              "if (!legend || !plot) return null;"
              "const above = [plot, box('.g-xtitle'), ...Array.from(gd.querySelectorAll('.xtick text'),"
              "  t => t.getBoundingClientRect())].filter(Boolean);"
              "return [legend.top, Math.max(...above.map(r => r.bottom)), legend.bottom,"
              "        gd.getBoundingClientRect().bottom];")
    dash_duo._wait_for(lambda d: (m := d.execute_script(script, graph_id)) and m[1] <= m[0] and m[2] <= m[3] + 1,
                       timeout=TIMEOUT, msg=f"{graph_id}'s legend overlaps the axis or leaves the figure: "
                                            f"{dash_duo.driver.execute_script(script, graph_id)}")


def _labels_inside(dash_duo, graph_id: str, trace: int) -> None:
    """Wait until every text label of a chart's `trace` lies within its plot area."""
    script = ("const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
              "const plot = gd && gd.querySelector('.nsewdrag');"
              "const tr = gd && gd.querySelectorAll('.scatterlayer .trace')[arguments[1]];"
              "if (!plot || !tr) return null;"
              "const p = plot.getBoundingClientRect();"
              "const texts = Array.from(tr.querySelectorAll('.textpoint text'), t => t.getBoundingClientRect());"
              "return [texts.length, texts.every(r => r.top >= p.top && r.bottom <= p.bottom"
              "                                    && r.left >= p.left && r.right <= p.right)];")
    dash_duo._wait_for(lambda d: (m := d.execute_script(script, graph_id, trace)) and m[0] > 0 and m[1],
                       timeout=TIMEOUT, msg=f"{graph_id}'s labels are cut at the plot's edge")


def test_pages_show_runs_refresh_live_and_plot_steps(dash_duo, ui_app, ui_data, influx_client):
    dash_duo.start_server(ui_app, port=free_port())

    # runs page: both runs, live and finished, linked
    dash_duo.wait_for_contains_text("#runs-table", ui_data.live_run, timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#runs-table", ui_data.done_run, timeout=TIMEOUT)
    text = dash_duo.find_element("#runs-table").text
    assert "live" in text and "finished" in text
    assert f"{ui_data.live_totals['start-to-end']:,}" in text
    assert dash_duo.get_logs() == []

    # job page of the live run: tables, charts, and a refresh without reloading. The run stays live
    # (its last point under 10 s old) however long the machine took so far: one more event now.
    now = time.time_ns() // NS * NS
    influx_client.write([latency_point(IntervalHistogram(ui_data.live_run, "orders", "start-to-end", "host-c/p0",
                                                         now, NS, LatencyHistogram.from_values(np.full(1, 10**8))))])
    dash_duo.find_element(f"#runs-table a[href='/run/{ui_data.live_run}']").click()
    total = ui_data.live_totals["start-to-end"] + 1
    dash_duo.wait_for_contains_text("#job-summary", f"{total:,} events start-to-end", timeout=TIMEOUT)
    for table in ("#job-steps", "#job-pipelines", "#job-workers"):
        dash_duo.wait_for_contains_text(table, "ms", timeout=TIMEOUT)
    assert "check_market_data" in dash_duo.find_element("#job-steps").text
    assert sum(sum(t["y"]) for t in _wait_traces(dash_duo, "job-throughput")) > 0
    assert len(_wait_traces(dash_duo, "job-percentiles")) == 3
    dash_duo.driver.execute_script("window.__not_reloaded = true;")

    last = time.time_ns() // NS * NS
    extra = LatencyHistogram.from_values(np.full(1234, 350_000_000))
    influx_client.write([latency_point(IntervalHistogram(ui_data.live_run, "orders", "start-to-end", "host-b/p9",
                                                         last, NS, extra))])
    dash_duo.wait_for_contains_text("#job-summary", f"{total + 1234:,} events start-to-end", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-workers", "host-b/p9", timeout=TIMEOUT)
    assert dash_duo.driver.execute_script("return window.__not_reloaded === true;")
    assert dash_duo.get_logs() == []

    # step page: Wallaroo bins, the percentile curve, throughput, workers, export links
    dash_duo.find_element("#job-steps a[href='/step/live-1/sink']").click()
    sink = ui_data.live_totals["sink"]
    dash_duo.wait_for_contains_text("#step-summary", f"{sink:,} events", timeout=TIMEOUT)
    bars = _wait_traces(dash_duo, "step-bins")[0]
    assert len(bars["x"]) == 12 and bars["x"][0] == "≤ 1 µs" and bars["x"][-1] == "> 1 s"
    assert abs(sum(bars["y"]) - 100.0) < 1e-6
    curve = _wait_traces(dash_duo, "step-curve")
    assert len(curve[0]["y"]) > 50 and curve[0]["y"] == sorted(curve[0]["y"])
    assert len(curve[1]["y"]) == 5                                   # the five Wallaroo percentiles
    _labels_inside(dash_duo, "step-curve", 1)
    assert sum(sum(t["y"]) for t in _wait_traces(dash_duo, "step-throughput")) > 0
    dash_duo.wait_for_contains_text("#step-workers", "host-a/p1", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#step-percentiles", "µs", timeout=TIMEOUT)
    href = dash_duo.find_element("#step-csv").get_attribute("href")
    assert "/export/live-1/sink.csv?from=" in href
    assert dash_duo.get_logs() == []


def test_finished_run_stays_viewable(dash_duo, ui_app, ui_data):
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/step/{ui_data.done_run}/start-to-end")
    total = ui_data.done_totals["start-to-end"]
    dash_duo.wait_for_contains_text("#step-summary", f"{total:,} events", timeout=TIMEOUT)
    assert _wait_traces(dash_duo, "step-bins")
    assert dash_duo.get_logs() == []


_PLOTLY_LOADS = ("return performance.getEntriesByType('resource')"
                 ".filter(r => r.name.endsWith('/package_data/plotly.min.js')).length;")


def test_plotly_runs_once_on_chart_pages_and_never_on_the_others(dash_duo, ui_app, ui_data):
    # the page's head starts plotly.js on a chart page; dcc.Graph then finds it and loads no second copy
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{ui_data.done_run}?open=backpressure,spark,ingress")
    for graph in ("job-throughput", "job-bp-busy", "job-batches"):
        dash_duo.wait_for_element(f"#{graph} .js-plotly-plot", timeout=TIMEOUT)
    assert dash_duo.driver.execute_script(_PLOTLY_LOADS) == 1
    assert dash_duo.driver.execute_script("return document.querySelectorAll('script[src$=\"plotly.min.js\"]')"
                                          ".length;") == 1
    dash_duo.driver.get(dash_duo.server_url + "/alerts")
    dash_duo.wait_for_element("#alerts-table", timeout=TIMEOUT)
    assert dash_duo.driver.execute_script("return typeof window.Plotly;") == "undefined"
    assert dash_duo.get_logs() == []


def test_unknown_run_shows_empty_state(dash_duo, ui_app, ui_data):
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.driver.get(dash_duo.server_url + "/run/no-such-run")
    dash_duo.wait_for_contains_text("#job-summary", "no data yet for this run", timeout=TIMEOUT)
    assert dash_duo.get_logs() == []


def test_unreachable_influxdb_shows_a_banner(dash_duo):
    url = f"http://127.0.0.1:{free_port()}"
    app = create_app(UiConfig(influx=InfluxConfig(url=url, db="none", timeout=2.0)))
    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_contains_text("#runs-banner", "is unreachable", timeout=TIMEOUT)
    assert url in dash_duo.find_element("#runs-banner").text
    # The table says why it is empty instead of "loading…" for as long as the page is open.
    dash_duo.wait_for_contains_text("#runs-table", "runs could not be read", timeout=TIMEOUT)
    assert "loading" not in dash_duo.find_element("#runs-table").text
    assert dash_duo.get_logs() == []


_PAGE_MESSAGES = ("return [...document.querySelectorAll('.js-plotly-plot')].flatMap(g => "
                  "(g._fullLayout.annotations || []).map(a => g.closest('.dash-graph').id + ': ' + a.text))"
                  ".concat([document.body.innerText]).join('\\n');")


def test_job_and_step_pages_say_why_they_are_empty_when_influxdb_is_unreachable(dash_duo):
    # At first load there is nothing to keep: every chart, table and panel says why it
    # is empty (not "loading…", and not "no data yet", which would be a claim about the run).
    url = f"http://127.0.0.1:{free_port()}"
    app = create_app(UiConfig(influx=InfluxConfig(url=url, db="none", timeout=2.0), refresh_ms=1000))
    dash_duo.start_server(app, port=free_port())
    job_graphs = ("job-throughput", "job-percentiles", "job-bp-busy", "job-bp-backlog", "job-batches", "job-bad-frames",
                  "job-muted")
    for path, banner, graphs in (("/run/r1?open=backpressure,spark,ingress", "#job-banner", job_graphs),
                                 ("/step/r1/sink", "#step-banner", ("step-bins", "step-curve", "step-throughput"))):
        dash_duo.driver.get(dash_duo.server_url + path)
        dash_duo.wait_for_contains_text(banner, "is unreachable", timeout=TIMEOUT)
        unread = [f"{g}: InfluxDB could not be read" for g in graphs]
        dash_duo._wait_for(lambda _d: all(m in dash_duo.driver.execute_script(_PAGE_MESSAGES) for m in unread),
                           timeout=TIMEOUT, msg=f"{path}: {dash_duo.driver.execute_script(_PAGE_MESSAGES)}")
        time.sleep(2.5)                                   # two more failed refreshes keep the messages
        messages = dash_duo.driver.execute_script(_PAGE_MESSAGES)
        assert all(m in messages for m in unread), messages
        assert not any(word in messages for word in ("loading", "no data", "no backpressure", "no Spark")), messages
    assert dash_duo.get_logs() == []


def _events(influx_client, run: str, step: str, where: str = "", params: dict | None = None) -> int:
    q = f'SELECT sum("count") FROM "latency" WHERE "run" = $run AND "step" = $step {where}'
    series = influx_client.query(q, dict(params or {}, run=run, step=step))
    return int(series[0].values[0][1]) if series else 0


def test_step_page_filters_by_worker_and_picks_a_custom_range(dash_duo, ui_app, ui_data, influx_client):
    from datetime import datetime, timezone
    dash_duo.start_server(ui_app, port=free_port())
    run, step = ui_data.done_run, "start-to-end"
    dash_duo.driver.get(dash_duo.server_url + f"/step/{run}/{step}")
    total = ui_data.done_totals[step]
    dash_duo.wait_for_contains_text("#step-summary", f"{total:,} events in the range", timeout=TIMEOUT)
    assert dash_duo.find_element("#step-range input[value='run']").is_selected()   # the default range: whole run

    # worker filter: only that worker's events, and the export links carry it
    dash_duo.select_dcc_dropdown("#step-worker", value="host-a/p1")
    p1 = _events(influx_client, run, step, 'AND "worker" = $w', {"w": "host-a/p1"})
    assert 0 < p1 < total
    dash_duo.wait_for_contains_text("#step-summary", f"{p1:,} events in the range (host-a/p1)", timeout=TIMEOUT)
    dash_duo._wait_for(lambda _d: "worker=host-a%2Fp1" in dash_duo.find_element("#step-csv").get_attribute("href"),
                       timeout=TIMEOUT, msg="the CSV link has no worker filter")
    dash_duo.wait_for_contains_text("#step-workers", "host-a/p1", timeout=TIMEOUT)
    assert "host-a/p0" not in dash_duo.find_element("#step-workers").text

    # custom range: a bad time is a visible message, a good one narrows the range to the second
    dash_duo.find_element("#step-range input[value='custom']").click()
    dash_duo.wait_for_contains_text("#step-banner", "pick a start date", timeout=TIMEOUT)
    start = ui_data.done_start_ns + 12 * NS
    day = datetime.fromtimestamp(start / 1e9, timezone.utc)
    date_input = dash_duo.find_element("#step-from-date")
    date_input.send_keys(day.strftime("%Y-%m-%d") + Keys.ENTER)
    dash_duo._wait_for(lambda _d: date_input.get_attribute("value") == day.strftime("%Y-%m-%d"), timeout=TIMEOUT,
                       msg="the date picker did not take the date")
    date_input.send_keys(Keys.ESCAPE)                                # close the calendar
    time_input = dash_duo.find_element("#step-from-time")
    time_input.click()
    time_input.send_keys("25:99\n")
    dash_duo.wait_for_contains_text("#step-banner", "is not HH:MM or HH:MM:SS (UTC)", timeout=TIMEOUT)
    time_input.clear()
    time_input.send_keys(day.strftime("%H:%M:%S") + "\n")
    later = _events(influx_client, run, step, 'AND "worker" = $w AND time >= $t',
                    {"w": "host-a/p1", "t": day.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert 0 < later < p1
    dash_duo.wait_for_contains_text("#step-summary", f"{later:,} events in the range", timeout=TIMEOUT)
    assert dash_duo.find_element("#step-banner").text == ""
    assert dash_duo.get_logs() == []


def test_bad_run_id_in_the_address_is_a_message(dash_duo, ui_app, ui_data):
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.driver.get(dash_duo.server_url + "/run/x%27%20OR%201%3D1")
    dash_duo.wait_for_contains_text("#job-banner", "may use only letters", timeout=TIMEOUT)
    dash_duo.driver.get(dash_duo.server_url + "/step/done-1/%3Dcmd")
    dash_duo.wait_for_contains_text("#step-banner", "step '=cmd' may use only letters", timeout=TIMEOUT)
    assert dash_duo.get_logs() == []


def test_dashboard_with_a_token_in_the_browser(dash_duo, influx_client, ui_data):
    from metrics_ui.auth import AuthConfig
    token = "browser-token-0123456789abcdef"
    app = create_app(UiConfig(influx=influx_client.config, auth=AuthConfig(token=token)))
    dash_duo.start_server(app, navigate=False, port=free_port())
    base = dash_duo.server.url.rstrip("/")
    dash_duo.driver.get(base + "/")
    dash_duo._wait_for(lambda d: "authentication required" in d.page_source, timeout=TIMEOUT, msg="no 401 page")
    dash_duo.driver.get(base + f"/run/{ui_data.done_run}?token={token}")
    assert token not in dash_duo.driver.current_url                  # swapped for a cookie, dropped from the URL
    total = ui_data.done_totals["start-to-end"]
    dash_duo.wait_for_contains_text("#job-summary", f"{total:,} events start-to-end", timeout=TIMEOUT)
    dash_duo.driver.get(base + "/")                                  # callbacks (POSTs) pass with the cookie
    dash_duo.wait_for_contains_text("#runs-table", ui_data.live_run, timeout=TIMEOUT)
    assert token not in dash_duo.driver.page_source


def test_pages_arrive_with_their_figures(ui_app, ui_data):
    """The runs, job and step pages' layouts carry their tables and drawn figures, so the browser
    draws each chart once, with no round of callbacks before it; a finished run's page does not tick."""
    import sys
    job, step, runs = (sys.modules[f"metrics_ui.pages.{m}"] for m in ("job", "step", "runs"))
    with ui_app.server.test_request_context("/"):
        done, live = job.layout(run_id=ui_data.done_run), job.layout(run_id=ui_data.live_run)
        opened = job.layout(run_id=ui_data.done_run, open="backpressure")
        step_page = step.layout(run_id=ui_data.done_run, step="start-to-end")
        runs_page = runs.layout()
    traces = lambda fig: fig["data"] if isinstance(fig, dict) else fig.data  # noqa: E731 (a Patch-able figure: its dict)
    for graph in (job.JOB_THROUGHPUT, job.JOB_PERCENTILES):
        assert traces(done[graph].figure), graph
    assert done[job.JOB_WINDOW].data["start"] < done[job.JOB_WINDOW].data["end"]
    from metrics_ui import status_panels as sp
    assert done[job.JOB_DIGESTS].data and done[sp.JOB_BP + "-digests"].data
    assert opened[sp.JOB_BP_BUSY].figure and sp.JOB_BATCHES not in opened  # its open row made, a folded one not
    assert sp.JOB_BP_BUSY not in done           # no backpressure written: its row is not opened (nor shown)
    assert f"{ui_data.done_totals['start-to-end']:,} events" in done[job.JOB_SUMMARY].children
    assert done[job.JOB_INTERVAL].disabled and done[job.JOB_LIVE].data is False
    assert not live[job.JOB_INTERVAL].disabled and live[job.JOB_LIVE].data is True
    assert traces(step_page[step.STEP_BINS].figure) and traces(step_page[step.STEP_THROUGHPUT].figure)
    assert f"{ui_data.done_totals['start-to-end']:,} events" in step_page[step.STEP_SUMMARY].children
    assert ui_data.done_run in str(runs_page[runs.RUNS_TABLE].children)
