"""HTTP as a browser sees it: gzip for those that accept it, 404 for what is not a page."""
from __future__ import annotations

import gzip

import pytest

from collector.influx import InfluxConfig
from collector.influx.server import free_port
from metrics_ui.app import UiConfig, create_app
from metrics_ui.compress import accepts_gzip


@pytest.mark.parametrize("header,ok", [("gzip, deflate, br", True), ("br;q=1.0, gzip;q=0.8", True), ("*", True),
                                       ("gzip;q=0", False), ("identity", False), ("", False), (None, False)])
def test_accept_encoding(header, ok):
    assert accepts_gzip(header) is ok


def _bundle_url(client) -> str:
    page = client.get("/").get_data(as_text=True)
    start = page.index("/_dash-component-suites/dash/dcc/dash_core_components.")
    return page[start:page.index('"', start)]


def test_bundles_and_callbacks_are_gzipped_when_asked():
    app = create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))
    client = app.server.test_client()
    url = _bundle_url(client)
    plain = client.get(url)
    assert plain.status_code == 200 and "Content-Encoding" not in plain.headers
    packed = client.get(url, headers={"Accept-Encoding": "gzip, deflate"})
    assert packed.headers["Content-Encoding"] == "gzip" and "Accept-Encoding" in packed.headers["Vary"]
    assert gzip.decompress(packed.data) == plain.data
    assert len(packed.data) < len(plain.data) / 2
    again = client.get(url, headers={"Accept-Encoding": "gzip"})          # served from the compressed cache
    assert again.data == packed.data
    # the page itself (HTML) too, and nothing for a client that refuses gzip
    assert client.get("/", headers={"Accept-Encoding": "gzip"}).headers.get("Content-Encoding") in (None, "gzip")
    assert "Content-Encoding" not in client.get(url, headers={"Accept-Encoding": "gzip;q=0"}).headers


def test_the_browser_receives_compressed_bundles(dash_duo):
    """Measured as the user's browser sees it: the bundles (plotly's among them) cross the wire compressed."""
    app = create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))
    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_page(f"{dash_duo.server_url}/compare", timeout=15)      # a page with charts loads plotly
    dash_duo.wait_for_element("#compare-latency .js-plotly-plot", timeout=15)
    sizes = dash_duo.driver.execute_script(
        "return performance.getEntriesByType('resource').filter(r => r.name.includes('_dash-component-suites')"
        " && r.decodedBodySize > 100000).map(r => [r.name, r.encodedBodySize, r.decodedBodySize]);")
    assert any("plotly" in name for name, _, _ in sizes), sizes
    assert all(0 < enc < dec / 2 for _, enc, dec in sizes), sizes


def test_unknown_pages_are_404_and_pages_200():
    """A mistyped URL tells the browser (and a bookmark checker) it is not found; real pages are 200."""
    app = create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))
    client = app.server.test_client()
    for path in ("/", "/alerts", "/compare", "/compare?runs=a,b", "/run/some-run", "/step/some-run/sink"):
        assert client.get(path).status_code == 200, path
    for path in ("/nope", "/run", "/run/a/b/c", "/step/only-run", "/alerts/x", "/.env"):
        r = client.get(path)
        assert r.status_code == 404 and r.mimetype == "text/html", path


def test_top_navigation_offers_runs_compare_and_alerts():
    import json
    app = create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))
    layout = json.loads(app.server.test_client().get("/_dash-layout").get_data(as_text=True))
    header = layout["props"]["children"][0]["props"]["children"]
    nav = {c["props"]["children"]: c["props"]["href"] for c in header if c["props"].get("className") == "nav"}
    assert nav == {"Runs": "/", "Compare": "/compare", "Alerts": "/alerts"}


def test_pages_get_regenerator_runtime_for_dashs_polyfill():
    """Dash's @babel/polyfill address answers with regenerator-runtime alone, gzipped; the pages need no more
    (every browser test of a page asserts an empty console)."""
    import re
    from metrics_ui import polyfill
    app = create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))
    client = app.server.test_client()
    src = [s for s in re.findall(r'src="([^"]+)"', client.get("/").get_data(as_text=True)) if "polyfill" in s]
    assert len(src) == 1 and polyfill.matches(src[0]), src
    packed = client.get(src[0], headers={"Accept-Encoding": "gzip"})
    assert packed.status_code == 200 and packed.headers["Content-Encoding"] == "gzip"
    script = gzip.decompress(packed.data)
    assert b"regeneratorRuntime = runtime" in script and b"core-js" not in script and len(script) < 30_000
    assert client.get(src[0]).data == script                                  # a client that refuses gzip
    again = client.get(src[0], headers={"If-None-Match": packed.headers["ETag"]})
    assert again.status_code == 304 and not again.data
    # only that address: another file of Dash's deps is Dash's own
    other = [s for s in re.findall(r'src="([^"]+)"', client.get("/").get_data(as_text=True)) if "react-dom" in s]
    assert b"regeneratorRuntime = runtime" not in client.get(other[0]).data


def test_charts_get_plotly_basic_bundle_preloaded():
    """dcc.Graph's plotly.js address answers with the vendored basic bundle (scatter, bar), gzipped, preloaded."""
    from metrics_ui import plotly_bundle
    app = create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))
    client = app.server.test_client()
    assert plotly_bundle.preload_links() in client.get("/").get_data(as_text=True)
    for chunk in plotly_bundle.CHART_CHUNKS:                # what the preloads name exists
        assert client.get(chunk).status_code == 200, chunk
    packed = client.get(plotly_bundle.PLOTLY_PATH, headers={"Accept-Encoding": "gzip"})
    assert packed.status_code == 200 and packed.headers["Content-Encoding"] == "gzip"
    script = gzip.decompress(packed.data)
    assert f"plotly.js (basic - minified) v{plotly_bundle.VERSION}".encode() in script[:200]
    assert b"window.Plotly = Plotly" in script
    assert client.get(plotly_bundle.PLOTLY_PATH).data == script            # a client that refuses gzip
    again = client.get(plotly_bundle.PLOTLY_PATH, headers={"If-None-Match": packed.headers["ETag"]})
    assert again.status_code == 304 and not again.data
