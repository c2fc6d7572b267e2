"""bench/ui_floor.py's page: drawn in a real headless Chromium in both forms, the tuned one with the dashboard's plotly.js."""
from __future__ import annotations

import pytest

from perf import ui_floor
from collector.influx.server import free_port
from metrics_ui import plotly_bundle

TIMEOUT = 15


@pytest.mark.parametrize("form", ui_floor.FORMS)
def test_floor_page_draws_its_chart(dash_duo, form):
    app = ui_floor.create_app(form)
    dash_duo.start_server(app, port=free_port())
    dash_duo.driver.get(dash_duo.server_url + ui_floor.FLOOR_PATH)
    dash_duo._wait_for(lambda d: d.execute_script(
        "const gd = document.querySelector('#floor-graph .js-plotly-plot');"
        "return !!(gd && gd._fullData && gd._fullData[0].y.length === 3);"), timeout=TIMEOUT, msg="the chart drawn")
    bundle = dash_duo.driver.execute_script("return window.Plotly.version + ' ' + (document.querySelector("
                                            "'link[rel=preload]') ? 'preloaded' : 'not preloaded')")
    assert bundle == (f"{plotly_bundle.VERSION} preloaded" if form == "tuned" else f"{plotly_bundle.VERSION} not preloaded")
    basic = app.server.test_client().get(plotly_bundle.PLOTLY_PATH).get_data()[:200]
    assert (b"plotly.js (basic - minified)" in basic) == (form == "tuned")
    assert dash_duo.get_logs() == []


def test_floor_refuses_an_unknown_form():
    with pytest.raises(ValueError, match="one of defaults, tuned"):
        ui_floor.create_app("fast")
