"""The job and step pages' charts in a real headless Chromium against a real InfluxDB (dash_duo).

A live run is kept live by a thread writing one more second of `latency` points each
second, as the job's metrics shipper does; the browser is then used as a user would: zoom
a chart, hide a series from its legend, pause, reload the address.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlparse

import pytest

from collector.bins import WALLAROO_UI_LABELS
from collector.influx import Point
from metrics_ui.app import UiConfig, create_app

from .conftest import NS, make_points
from collector.influx.server import free_port as _free_port
from .test_pages import TIMEOUT, _wait_traces

def _layout(dash_duo, graph_id: str) -> dict:
    """Return what the browser holds of a chart: x range, legend names and visibility, shapes, annotations."""
    return dash_duo.driver.execute_script(
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "if (!gd || !gd._fullLayout) return null;"
        "const L = gd._fullLayout;"
        "return {range: L.xaxis ? L.xaxis.range.map(r => String(r).replace('T', ' ').slice(0, 19)) : null,"
        "  names: gd._fullData.map(t => t.name), visible: gd._fullData.map(t => String(t.visible)),"
        "  colours: gd._fullData.map(t => t.line ? t.line.color : null),"
        "  dashes: gd._fullData.map(t => t.line ? t.line.dash : null),"
        "  ticktext: L.yaxis && L.yaxis.ticktext ? Array.from(L.yaxis.ticktext) : [],"
        "  text: gd._fullData.map(t => t.text ? Array.from([].concat(t.text)) : []),"
        "  shapes: (L.shapes || []).length, annotations: (L.annotations || []).map(a => a.text),"
        "  hovermode: L.hovermode};", graph_id)


class LiveWriter:
    """Keep a run live: write one more second of its points every second, at times the test chooses."""

    def __init__(self, client, run: str, first_ns: int):
        self.client, self.run, self.next_ns = client, run, first_ns
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        seed = 100
        while not self.stop.wait(1.0):
            now = time.time_ns() // NS * NS
            while self.next_ns <= now:
                seed += 1
                points, _ = make_points(self.run, self.next_ns, 1, events_per_s=200, seed=seed)
                self.client.write(points)
                self.next_ns += NS

    def __enter__(self) -> "LiveWriter":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


@pytest.fixture
def live_run(influx_client):
    """A run with 60 s of points up to now, kept live while the test runs."""
    run = "live-z"
    now = time.time_ns() // NS * NS
    points, _ = make_points(run, now - 59 * NS, 60, events_per_s=400, seed=3)
    influx_client.write(points)
    with LiveWriter(influx_client, run, now + NS) as writer:
        yield run, now - 59 * NS, writer


def _app(influx_client, tmp_path):
    return create_app(UiConfig(influx=influx_client.config, refresh_ms=1000, alerts_file=tmp_path / "rules.json"))


def _summary_events(dash_duo) -> int:
    text = dash_duo.find_element("#job-summary").text
    return int(text.split(" events")[0].replace(",", "")) if " events" in text else -1


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def test_live_job_page_keeps_the_users_view_shares_one_range_and_puts_it_in_the_address(
        dash_duo, influx_client, live_run, tmp_path):
    run, first, _writer = live_run
    dash_duo.start_server(_app(influx_client, tmp_path), port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{run}")
    dash_duo.wait_for_contains_text("#job-summary", "live", timeout=TIMEOUT)
    _wait_traces(dash_duo, "job-percentiles")
    assert dash_duo.driver.current_url.endswith(f"/run/{run}")              # defaults: a clean address

    # hide p99.9 from the legend (a click, as a user does)
    names = _layout(dash_duo, "job-percentiles")["names"]
    assert names == ["p50", "p99", "p99.9"], names
    dash_duo.find_elements("#job-percentiles .legendtoggle")[2].click()
    dash_duo._wait_for(lambda d: _layout(dash_duo, "job-percentiles")["visible"][2] == "legendonly",
                       timeout=TIMEOUT, msg="the legend click did not hide p99.9")

    # zoom the throughput chart's time axis: that becomes the page's range, for every chart and in the address
    lo, hi = _utc(first + 10 * NS), _utc(first + 40 * NS)
    dash_duo.driver.execute_script(
        "const gd = document.querySelector('#job-throughput .js-plotly-plot');"
        "Plotly.relayout(gd, {'xaxis.range[0]': arguments[0], 'xaxis.range[1]': arguments[1]});", lo, hi)
    dash_duo._wait_for(lambda d: dash_duo.find_element("#job-range input[value='custom']").is_selected(),
                       timeout=TIMEOUT, msg="the zoom did not become the page's range")
    query = lambda: parse_qs(urlparse(dash_duo.driver.current_url).query)  # noqa: E731
    dash_duo._wait_for(lambda d: query().get("from") == [lo.replace(" ", "T") + "Z"]
                       and query().get("to") == [hi.replace(" ", "T") + "Z"], timeout=TIMEOUT,
                       msg=f"the address does not carry the range: {dash_duo.driver.current_url}")
    for graph in ("job-throughput", "job-percentiles"):
        dash_duo._wait_for(lambda d, g=graph: (_layout(dash_duo, g) or {}).get("range", [""])[0].startswith(lo),
                           timeout=TIMEOUT, msg=f"{graph} does not show the shared range: {_layout(dash_duo, graph)} "
                                                f"{dash_duo.find_element('#job-summary').text}")

    # live updates go on (a late point inside the range shows up) and keep the zoom and the hidden series
    before = _summary_events(dash_duo)
    late, _ = make_points(run, first + 20 * NS, 1, events_per_s=1000, seed=99)
    influx_client.write([p._replace(tags=dict(p.tags, worker=p.tags["worker"] + "-late")) for p in late])
    dash_duo._wait_for(lambda d: _summary_events(dash_duo) > before, timeout=TIMEOUT,
                       msg="the live page did not update")
    time.sleep(2.5)                                                  # two more ticks
    view = _layout(dash_duo, "job-percentiles")
    assert view["visible"][2] == "legendonly", view
    assert view["range"][0].startswith(lo) and view["range"][1].startswith(hi), view

    # pause: the address says so, and new points no longer show; resuming shows them
    dash_duo.find_element("#job-refresh input[value='off']").click()
    dash_duo._wait_for(lambda d: query().get("refresh") == ["off"], timeout=TIMEOUT, msg="pause not in the address")
    time.sleep(1.5)                                                   # a tick already on its way lands
    paused = _summary_events(dash_duo)
    late, _ = make_points(run, first + 25 * NS, 1, events_per_s=1000, seed=98)
    influx_client.write([p._replace(tags=dict(p.tags, worker=p.tags["worker"] + "-paused")) for p in late])
    time.sleep(3)
    assert _summary_events(dash_duo) == paused
    dash_duo.find_element("#job-refresh input[value='1']").click()
    dash_duo._wait_for(lambda d: _summary_events(dash_duo) > paused, timeout=TIMEOUT, msg="resuming did not refresh")

    # the address reopens the same view: the range, its bounds and the refresh rate
    dash_duo.find_element("#job-refresh input[value='5']").click()
    dash_duo._wait_for(lambda d: query().get("refresh") == ["5"], timeout=TIMEOUT, msg="refresh not in the address")
    url = dash_duo.driver.current_url
    dash_duo.driver.get(dash_duo.server_url + "/")
    dash_duo.driver.get(url)
    dash_duo.wait_for_contains_text("#job-summary", "live", timeout=TIMEOUT)
    assert dash_duo.find_element("#job-range input[value='custom']").is_selected()
    assert dash_duo.find_element("#job-refresh input[value='5']").is_selected()
    assert dash_duo.find_element("#job-from-time").get_attribute("value") == lo[11:]
    assert dash_duo.find_element("#job-to-time").get_attribute("value") == hi[11:]
    dash_duo._wait_for(lambda d: (_layout(dash_duo, "job-throughput") or {}).get("range", [""])[0].startswith(lo),
                       timeout=TIMEOUT, msg="the reopened page does not show the range of its address")
    assert dash_duo.get_logs() == []


def _post_sizes(dash_duo) -> list[int]:
    """Return the (uncompressed) body sizes of the page's Dash callback answers so far, oldest first."""
    return dash_duo.driver.execute_script(
        "return performance.getEntriesByType('resource')"
        ".filter(e => e.name.includes('_dash-update-component')).map(e => e.decodedBodySize);")


def test_a_live_tick_sends_only_what_changed(dash_duo, influx_client, live_run, tmp_path):
    run, first, _writer = live_run
    dash_duo.start_server(_app(influx_client, tmp_path), port=_free_port())
    # a fixed range inside the run: ticks go on (the run is live) but its charts do not change
    lo, hi = _utc(first), _utc(first + 30 * NS)
    dash_duo.driver.get(dash_duo.server_url + f"/run/{run}?range=custom&from={lo.replace(' ', 'T')}Z"
                                              f"&to={hi.replace(' ', 'T')}Z")
    _wait_traces(dash_duo, "job-throughput")
    dash_duo.driver.execute_script("performance.setResourceTimingBufferSize(10000);")
    # every panel's first answer in (on a loaded machine some come seconds after the first chart):
    # no new answer carrying a figure for 3 s
    big, since = -1, time.monotonic()
    while time.monotonic() - since < 3.0:
        n = sum(1 for size in _post_sizes(dash_duo) if size > 5_000)
        if n != big:
            big, since = n, time.monotonic()
        assert time.monotonic() - since < TIMEOUT
        time.sleep(0.25)
    first_answers = _post_sizes(dash_duo)
    assert max(first_answers) > 20_000, first_answers                 # the figures, once
    dash_duo._wait_for(lambda d: len(_post_sizes(dash_duo)) >= len(first_answers) + 9, timeout=TIMEOUT,
                       msg="no ticks")
    ticks = _post_sizes(dash_duo)[len(first_answers) + 3:]
    # each tick: the summary (the whole run's count grows) and the range, no figure or table
    assert ticks and max(ticks) < 2_000, ticks
    assert dash_duo.get_logs() == []


def test_bad_range_in_the_address_is_a_message(dash_duo, influx_client, live_run, tmp_path):
    run, _first, _writer = live_run
    dash_duo.start_server(_app(influx_client, tmp_path), port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{run}?range=custom&from=2026-13-01T00:00:00Z")
    dash_duo.wait_for_contains_text("#job-banner", "not a valid date", timeout=TIMEOUT)
    assert dash_duo.find_element("#job-range input[value='run']").is_selected()     # the default (whole run) instead
    dash_duo.wait_for_contains_text("#job-summary", "live", timeout=TIMEOUT)
    dash_duo.driver.get(dash_duo.server_url + f"/step/{run}/sink?refresh=7")
    dash_duo.wait_for_contains_text("#step-banner", "unknown refresh '7'", timeout=TIMEOUT)
    assert dash_duo.get_logs() == []


def test_markers_axes_colours_and_labels(dash_duo, influx_client, ui_data, tmp_path):
    run, start = ui_data.done_run, ui_data.done_start_ns
    influx_client.write([
        Point("runs", {"run": run, "query": "q"}, {"status": "finished", "end_ns": start + 19 * NS}, start + NS),
        Point("alert_events", {"rule": "e2e-p99"}, {"state": "FIRING", "previous": "PENDING",
                                                    "condition": "p99 > 5ms", "scope": f"job {run} · start-to-end"},
              start + 5 * NS),
        Point("alert_events", {"rule": "other-run"}, {"state": "FIRING", "previous": "PENDING",
                                                      "condition": "p99 > 5ms", "scope": "job someone-else"},
              start + 6 * NS),
    ])
    dash_duo.start_server(_app(influx_client, tmp_path), port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{run}")
    _wait_traces(dash_duo, "job-percentiles")

    # run start and end and the run's own alert, drawn on every latency chart, with one hover for all series
    for graph in ("job-throughput", "job-percentiles"):
        view = _layout(dash_duo, graph)
        assert view["shapes"] == 3, view
        assert sorted(view["annotations"]) == ["e2e-p99 FIRING", "query finished", "query started"], view
        assert view["hovermode"] == "x unified"
    # latency axis in its units, never "10k ms"; the legend says p99.9
    pct = _layout(dash_duo, "job-percentiles")
    assert pct["names"] == ["p50", "p99", "p99.9"]
    assert pct["ticktext"] and all(t.endswith((" µs", " ms", " s")) for t in pct["ticktext"]), pct
    assert len(pct["ticktext"]) >= 3 and "k" not in "".join(pct["ticktext"]), pct
    shown = [t.text for t in dash_duo.find_elements("#job-percentiles .ytick text")]
    assert len(shown) >= 2 and all(t.endswith((" µs", " ms", " s")) for t in shown), shown     # as drawn
    # nbbo and orders: different colours and dashes, so equal lines stay visible
    tp = _layout(dash_duo, "job-throughput")
    assert tp["names"] == ["nbbo", "orders"] and len(set(tp["colours"])) == 2 and len(set(tp["dashes"])) == 2, tp

    # step page: value labels on the bins, the curve's axis in units
    dash_duo.driver.get(dash_duo.server_url + f"/step/{run}/start-to-end")
    bars = _wait_traces(dash_duo, "step-bins")[0]
    labels = _layout(dash_duo, "step-bins")["text"][0]
    # Wallaroo's ranges, then the long ones up to the data's longest (its tail passes 1 s): `step_bins`
    assert bars["x"][:11] == list(WALLAROO_UI_LABELS[:11]) and len(labels) == len(bars["x"]) >= 12, bars["x"]
    assert all((label == "") == (y == 0) for label, y in zip(labels, bars["y"])), labels
    assert any(label.endswith(" %") for label in labels)
    curve = _layout(dash_duo, "step-curve")
    assert curve["ticktext"] and all(t.endswith((" µs", " ms", " s")) for t in curve["ticktext"]), curve
    assert _layout(dash_duo, "step-throughput")["annotations"]       # the markers there too
    assert dash_duo.get_logs() == []


def test_one_hover_for_every_time_chart(dash_duo, influx_client, ui_data, tmp_path):
    """Pointing at a moment in one chart shows that moment in the page's other time charts."""
    from selenium.webdriver.common.action_chains import ActionChains
    run = ui_data.done_run
    dash_duo.start_server(_app(influx_client, tmp_path), port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{run}")
    _wait_traces(dash_duo, "job-percentiles")
    _wait_traces(dash_duo, "job-throughput")
    labels = ("return document.querySelectorAll('#' + arguments[0] + ' .hoverlayer .legend,"
              " #' + arguments[0] + ' .hoverlayer .hovertext').length")
    assert dash_duo.driver.execute_script(labels, "job-percentiles") == 0
    plot = dash_duo.find_element("#job-throughput .nsewdrag")
    ActionChains(dash_duo.driver).move_to_element(plot).move_by_offset(5, 0).perform()
    dash_duo._wait_for(lambda _d: dash_duo.driver.execute_script(labels, "job-throughput") > 0, timeout=TIMEOUT,
                       msg="the hovered chart's own label")
    dash_duo._wait_for(lambda _d: dash_duo.driver.execute_script(labels, "job-percentiles") > 0, timeout=TIMEOUT,
                       msg="the same moment shown on the latency chart")
    assert dash_duo.get_logs() == []
