"""A page's start: its layout computed as its shell is served, the renderer's first requests preloaded,
no unused bundle, and no chart redrawn (nor a callback sent) by a resize that changes no size."""
from __future__ import annotations

import json
import re

from flask import Flask

from collector.influx import InfluxConfig
from collector.influx.server import free_port
from metrics_ui import prefetch
from metrics_ui.app import UiConfig, create_app


def plotly_json():
    from plotly.utils import PlotlyJSONEncoder
    return PlotlyJSONEncoder


def _app():
    return create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))


def test_a_prefetched_layout_is_taken_once_and_only_while_fresh():
    now = [0.0]
    calls = []
    pre = prefetch.Prefetch(max_pending=2, max_age_s=10, clock=lambda: now[0])
    server = Flask(__name__)

    def layout(**kwargs):
        calls.append(kwargs)
        return f"page {kwargs}"
    pre.start(server, "pages.job", layout, {"run_id": "a"})
    pre.start(server, "pages.job", layout, {"run_id": "a"})            # the same page twice: computed once
    assert pre.take("pages.job", {"run_id": "a"}).result(5) == "page {'run_id': 'a'}"
    assert pre.take("pages.job", {"run_id": "a"}) is None               # used once
    assert calls == [{"run_id": "a"}]
    pre.start(server, "pages.job", layout, {"run_id": "b"})
    assert pre.take("pages.job", {"run_id": "b", "refresh": "off"}) is None    # another address: not this one
    now[0] = 11.0
    assert pre.take("pages.job", {"run_id": "b"}) is None               # too old: the page computes it afresh
    for run in "cde":                                                   # at most max_pending kept
        pre.start(server, "pages.job", layout, {"run_id": run})
    assert pre.take("pages.job", {"run_id": "c"}) is None and pre.take("pages.job", {"run_id": "e"}) is not None


def _router_body(pathname: str, search: str) -> dict:
    return {"output": ".._pages_content.children..._pages_store.data..",
            "outputs": [{"id": "_pages_content", "property": "children"}, {"id": "_pages_store", "property": "data"}],
            "inputs": [{"id": "_pages_location", "property": "pathname", "value": pathname},
                       {"id": "_pages_location", "property": "search", "value": search}],
            "changedPropIds": ["_pages_location.pathname", "_pages_location.search"], "state": []}


def test_the_page_shell_starts_its_layout_and_the_router_takes_it():
    app = _app()
    pre = app.server.extensions[prefetch.EXTENSION]
    client = app.server.test_client()
    assert client.get("/nope").status_code == 404 and not pre._pending          # no page: nothing started
    shell = client.get("/compare?runs=a,b")
    assert shell.status_code == 200 and len(pre._pending) == 1
    future = next(iter(pre._pending.values()))[1]
    future.result(30)
    r = client.post("/_dash-update-component", json=_router_body("/compare", "?runs=a,b"))
    assert r.status_code == 200 and not pre._pending                            # taken by the router's callback
    content = r.get_json()["response"]["_pages_content"]["children"]
    assert content == json.loads(json.dumps(future.result().to_plotly_json(), cls=plotly_json()))
    # without a shell first (the user moved within the dashboard), the router computes the page itself
    again = client.post("/_dash-update-component", json=_router_body("/compare", "?runs=a,b"))
    assert again.status_code == 200 and again.get_json()["response"]["_pages_content"]["children"]


def test_the_shell_preloads_the_renderers_first_requests_and_has_no_dash_table():
    client = _app().server.test_client()
    page = client.get("/").get_data(as_text=True)
    assert prefetch.preload_links() in page
    for path in prefetch.STARTUP_PATHS:
        assert client.get(path).status_code == 200, path
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert any("dash_core_components" in s for s in scripts) and not any("dash_table" in s for s in scripts)


def test_a_resize_that_changes_no_size_redraws_nothing(dash_duo):
    """dcc.Graph resizes each chart as it mounts: unchanged, plotly.js is not asked to relayout (nor Dash
    to send the chart's relayoutData); a real change of size still relayouts."""
    dash_duo.start_server(_app(), port=free_port())
    dash_duo.wait_for_page(f"{dash_duo.server_url}/compare", timeout=15)
    dash_duo.wait_for_element("#compare-latency .js-plotly-plot", timeout=15)
    # the chart as drawn, no resize of its own mounting still pending
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(dash_duo.driver, 15).until(lambda d: d.execute_script(
        "const gd = document.querySelector('#compare-latency .js-plotly-plot');"
        "return !!(gd && gd._fullLayout && !gd._resolveResize)"))
    relayouts = dash_duo.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const gd = document.querySelector('#compare-latency .js-plotly-plot');
        const seen = []; gd.on('plotly_relayout', e => seen.push(JSON.stringify(e)));
        Plotly.Plots.resize(gd).then(() => setTimeout(() => {
            const unchanged = seen.length;
            gd.style.width = (gd._fullLayout.width - 100) + 'px';
            Plotly.Plots.resize(gd).then(() => setTimeout(() => done([unchanged, seen.length]), 50));
        }, 300));
    """)
    assert relayouts == [0, 1]
    # a chart inside a hidden element: nothing to measure, no relayout; shown, it takes its new size
    hidden = dash_duo.driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const gd = document.querySelector('#compare-latency .js-plotly-plot');
        const seen = []; gd.on('plotly_relayout', e => seen.push(JSON.stringify(e)));
        gd.parentNode.style.display = 'none';
        Plotly.Plots.resize(gd).then(() => setTimeout(() => {
            const whileHidden = seen.length;
            gd.parentNode.style.display = '';
            gd.style.width = (gd._fullLayout.width - 50) + 'px';
            Plotly.Plots.resize(gd).then(() => setTimeout(() => done([whileHidden, seen.length]), 50));
        }, 300));
    """)
    assert hidden == [0, 1]
    assert dash_duo.get_logs() == []
