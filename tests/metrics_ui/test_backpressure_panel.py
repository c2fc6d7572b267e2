"""The job page's backpressure panel: its store query against a real InfluxDB, and in Chromium."""
from __future__ import annotations

import time

from collector.backpressure import BackpressureFigures, backpressure_point
from collector.influx import Point
from collector.query.panels import SPARK_PROGRESS
from collector.query.store import MetricsStore
from collector.query.ranges import TimeRange

from .conftest import NS
from collector.influx.server import free_port as _free_port
from .test_pages import TIMEOUT, _legend_clear, _wait_traces

RED = "rgb(163, 31, 31)"                # .bp-badge.bp-high in static/style.css
GREEN = "rgb(30, 107, 51)"              # .bp-badge.bp-ok


def _figures(status: str, busy: float | None = None, backpressured: float | None = None,
             backlog: int | None = None, growth: float | None = None) -> BackpressureFigures:
    idle = None if busy is None else 1.0 - busy
    return BackpressureFigures(busy, backpressured, idle, backlog, growth, status)


def _pipeline_points(run: str, start_ns: int, seconds: int, cmd_high_from: int = 0) -> list[Point]:
    """Return a second-by-second backpressure history: check_market_data turns HIGH at `cmd_high_from`."""
    points = []
    for i in range(seconds):
        t = start_ns + i * NS
        high = i >= cmd_high_from
        points += [
            backpressure_point(run, "ingress", _figures("LOW", backpressured=0.3, backlog=1000 + i,
                                                        growth=1.0), t),
            backpressure_point(run, "source", _figures("OK", busy=0.2), t),
            backpressure_point(run, "check_market_data", _figures("HIGH" if high else "OK",
                                                                  busy=0.8 if high else 0.05), t),
            backpressure_point(run, "sink", _figures("OK", busy=0.1), t),
            backpressure_point(run, "job", _figures("LOW", busy=0.9, backpressured=0.3, backlog=100 * i,
                                                    growth=100.0), t),
        ]
    return points


def test_store_returns_latest_figures_per_step_and_bucketed_series(influx_client):
    start = (time.time_ns() - 600 * NS) // (10 * NS) * (10 * NS)
    influx_client.write(_pipeline_points("bp-1", start, 20, cmd_high_from=10)
                        + [backpressure_point("other", "sink", _figures("HIGH", busy=1.0), start + 19 * NS)])
    store = MetricsStore(influx_client)

    view = store.backpressure_view("bp-1", TimeRange(start, start + 20 * NS), 10)
    assert [b.step for b in view.latest] == ["ingress", "source", "check_market_data", "sink", "job"]
    latest = {b.step: b for b in view.latest}
    assert latest["check_market_data"].status == "HIGH" and latest["check_market_data"].busy_share == 0.8
    assert latest["check_market_data"].time_ns == start + 19 * NS
    assert latest["sink"].status == "OK" and latest["sink"].busy_share == 0.1    # not the other run's HIGH
    assert abs(latest["sink"].idle_share - 0.9) < 1e-9
    assert latest["sink"].backlog is None and latest["sink"].backpressured_share is None
    assert latest["ingress"].busy_share is None and latest["ingress"].backpressured_share == 0.3
    assert latest["ingress"].backlog == 1019 and latest["job"].backlog == 1900
    assert latest["job"].backlog_growth_per_s == 100.0

    busy = {s.name: s for s in view.busy}
    assert list(busy) == ["source", "check_market_data", "sink", "job"]          # the ingress has no busy share
    assert busy["check_market_data"].times_ns == (start, start + 10 * NS)
    assert [round(v, 9) for v in busy["check_market_data"].values] == [0.05, 0.8]
    assert [s.name for s in view.backpressured] == ["ingress", "job"]
    backlog = {s.name: s for s in view.backlog}
    assert backlog["job"].values == (900.0, 1900.0)                              # max per bucket
    assert backlog["ingress"].values == (1009.0, 1019.0)

    # a range ends before the change: its latest figures are from inside it
    early = store.backpressure_view("bp-1", TimeRange(start, start + 10 * NS), 1)
    assert {b.step: b.status for b in early.latest}["check_market_data"] == "OK"
    assert len(next(s for s in early.busy if s.name == "sink").values) == 10


def test_store_without_backpressure_points_falls_back_to_spark_progress_backlog(influx_client):
    start = (time.time_ns() - 600 * NS) // (10 * NS) * (10 * NS)
    influx_client.write([Point(SPARK_PROGRESS, {"run": "sp-1", "query": "q"}, {"backlog": 50 * i, "batch_id": i},
                               start + i * NS) for i in range(20)])
    store = MetricsStore(influx_client)
    view = store.backpressure_view("sp-1", TimeRange(start, start + 20 * NS), 10)
    assert view.latest == [] and view.busy == [] and view.backpressured == []
    assert [(s.name, s.values) for s in view.backlog] == [("job", (450.0, 950.0))]
    none = store.backpressure_view("no-such-run", TimeRange(start, start + 20 * NS), 10)
    assert none.latest == [] and none.backlog == []


def _badge(dash_duo, step: str) -> tuple[str, str, str] | None:
    """Return a step's badge as (text, class, colour), read at once: the live refresh re-renders the table."""
    return dash_duo.driver.execute_script(
        "const b = document.querySelector(arguments[0]);"
        "return b && [b.textContent, b.className, getComputedStyle(b).color];",
        f"#job-backpressure-table tbody tr:nth-child({_ROW[step]}) .bp-badge")


def _table(dash_duo) -> list[list[str]]:
    """Return the backpressure table's body cells, read at once."""
    return dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll('#job-backpressure-table tbody tr'),"
        "  tr => Array.from(tr.querySelectorAll('td'), td => td.textContent));")


_ROW = {"ingress": 1, "source": 2, "check_market_data": 3, "sink": 4, "job": 5}


def test_job_page_shows_backpressure_table_and_charts(dash_duo, ui_app, ui_data, influx_client):
    influx_client.write(_pipeline_points(ui_data.live_run, ui_data.live_start_ns, 30))
    dash_duo.start_server(ui_app, port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{ui_data.live_run}")

    dash_duo.wait_for_contains_text("#job-backpressure-table", "HIGH", timeout=TIMEOUT)
    rows = _table(dash_duo)
    assert [r[0] for r in rows] == list(_ROW)
    (high, high_class, high_color), (ok, ok_class, ok_color) = _badge(dash_duo, "check_market_data"), \
        _badge(dash_duo, "sink")
    assert high == "HIGH" and "bp-high" in high_class and high_color == RED
    assert ok == "OK" and "bp-ok" in ok_class and ok_color == GREEN
    assert "bp-low" in _badge(dash_duo, "ingress")[1]
    assert rows[_ROW["check_market_data"] - 1][2:5] == ["80", "—", "20"]          # busy, backpressured, idle %
    assert rows[_ROW["job"] - 1][5] == "2,900"

    busy = _wait_traces(dash_duo, "job-bp-busy")
    assert any(80.0 in t["y"] for t in busy) and all(0 <= y <= 100 for t in busy for y in t["y"])
    assert max(y for t in _wait_traces(dash_duo, "job-bp-backlog") for y in t["y"]) == 2900
    _legend_clear(dash_duo, "job-bp-busy")                          # six entries, below the axis title

    # the live refresh brings a step's new status
    influx_client.write([backpressure_point(ui_data.live_run, "sink", _figures("HIGH", busy=0.95), time.time_ns())])
    dash_duo._wait_for(lambda _d: (_badge(dash_duo, "sink") or [""])[0] == "HIGH", timeout=TIMEOUT,
                       msg="the sink's new status did not show")
    assert dash_duo.get_logs() == []


def test_job_page_without_backpressure_points_leaves_the_panel_out(dash_duo, ui_app, ui_data):
    dash_duo.start_server(ui_app, port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{ui_data.done_run}")
    total = ui_data.done_totals["start-to-end"]
    dash_duo.wait_for_contains_text("#job-summary", f"{total:,} events start-to-end", timeout=TIMEOUT)
    assert dash_duo.find_element("#job-steps-table").is_displayed()
    assert not dash_duo.find_element("#job-bp-box").is_displayed()      # no empty table, no empty charts
    assert not dash_duo.find_elements("#job-bp-busy") and not dash_duo.find_elements("#job-backpressure .bp-badge")
    assert dash_duo.get_logs() == []


def test_finished_run_panel_shows_the_backlog_written_after_its_last_latency_point(dash_duo, ui_app, ui_data,
                                                                                    influx_client):
    # the run's latency points cover 20 s; its ingress and job report the drained backlog 4 s later
    start, total = ui_data.done_start_ns, ui_data.done_totals["start-to-end"]
    drained = ui_data.done_start_ns + 23 * NS
    influx_client.write(_pipeline_points(ui_data.done_run, start, 20) + [
        backpressure_point(ui_data.done_run, "ingress", _figures("OK", backpressured=0.0, backlog=0, growth=-250.0),
                           drained),
        backpressure_point(ui_data.done_run, "job", _figures("OK", busy=0.1, backpressured=0.0, backlog=0,
                                                             growth=-475.0), drained)])
    dash_duo.start_server(ui_app, port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{ui_data.done_run}")

    # the latency figures still count the run's events only, the panel its final figures
    dash_duo.wait_for_contains_text("#job-summary", f"{total:,} events start-to-end in the range · {total:,} in "
                                                    "the whole run · finished", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-backpressure-table", "-475", timeout=TIMEOUT)
    rows = {r[0]: r for r in _table(dash_duo)}
    assert rows["ingress"][5:] == ["0", "-250"] and rows["job"][5:] == ["0", "-475"], rows
    ends = [t["y"][-1] for t in _wait_traces(dash_duo, "job-bp-backlog")]
    assert ends == [0, 0], ends                                   # both series end drained
    assert dash_duo.get_logs() == []


def test_finished_run_shows_the_ingress_counters_and_batches_written_after_its_last_latency_point(
        dash_duo, ui_app, ui_data, influx_client):
    # A short replay: the ingress' only status point is its final one, written when it stops,
    # after the run's last latency point; so is the Spark listener's last batch.
    run, stopped = ui_data.done_run, ui_data.done_start_ns + 21 * NS
    influx_client.write([
        Point("ingress", {"run": run}, {"accepted": 1000, "bad": 2, "muted_seconds": 1.5, "mute_episodes": 1}, stopped),
        Point("ingress_bad", {"run": run, "reason": "unknown message type"}, {"frames": 2}, stopped),
        Point(SPARK_PROGRESS, {"run": run, "query": "q"}, {"batch_ms": 40.0, "batch_id": 0}, ui_data.done_start_ns),
        Point(SPARK_PROGRESS, {"run": run, "query": "q"}, {"batch_ms": 30.0, "batch_id": 1}, stopped)])
    dash_duo.start_server(ui_app, port=_free_port())
    dash_duo.driver.get(dash_duo.server_url + f"/run/{run}?open=ingress")       # the address opens the row

    dash_duo.wait_for_contains_text("#job-ingress-summary", "2 bad frames set aside (unknown message type 2) · "
                                                            "muted 1.5 s in 1 episodes", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-batch-summary", "2 micro-batches in the range", timeout=TIMEOUT)
    assert sum(y for t in _wait_traces(dash_duo, "job-bad-frames") for y in t["y"]) == 2
    assert dash_duo.get_logs() == []
