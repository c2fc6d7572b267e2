"""Issue-32 item 10 in a real browser: a zoom whose two ends differ in form sets the job page's range."""
from __future__ import annotations

import time

from collector.influx.server import free_port

from .conftest import NS
from .test_pages import TIMEOUT, _wait_traces


def test_a_zoom_with_one_aware_and_one_naive_end_becomes_the_range(dash_duo, ui_app, ui_data):
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/{ui_data.live_run}")
    _wait_traces(dash_duo, "job-throughput")
    fmt = lambda ns: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns / NS))  # noqa: E731
    lo = fmt(ui_data.live_start_ns + 5 * NS) + "+00:00"                      # aware, as the server writes
    hi = fmt(ui_data.live_start_ns + 20 * NS).replace("T", " ") + ".858671"    # naive, as Plotly writes
    # the chart's relayoutData as the page receives it (Plotly itself cleans what it is given)
    dash_duo.driver.execute_script(
        "window.dash_clientside.set_props('job-throughput',"
        "  {relayoutData: {'xaxis.range[0]': arguments[0], 'xaxis.range[1]': arguments[1]}});", lo, hi)
    dash_duo._wait_for(lambda d: dash_duo.find_element("#job-range input[value='custom']").is_selected(),
                       timeout=TIMEOUT, msg="the zoom with mixed ends did not become the page's range")
    assert "from=" in dash_duo.driver.current_url and "to=" in dash_duo.driver.current_url
    assert dash_duo.get_logs() == []                     # no failed callback (a 500 logs a SEVERE line)
