"""A live page's refresh ticks in headless Chromium against a real InfluxDB: only the new points travel.

A run of 330 s, shown over the last 5 minutes (shorter than the run, so the window slides;
over the page's default, the whole run, it would only grow), is kept live by a thread
writing one more second each second. Every `/_dash-update-component` response the page
receives is recorded in the browser (a `fetch` wrapper installed before the page's own
scripts), so the test sees what each tick sent.
"""
from __future__ import annotations

import json
import time

import pytest

from collector.influx.server import free_port as _free_port
from metrics_ui.app import UiConfig, create_app

from .conftest import NS, make_points
from .test_charts import LiveWriter
from .test_pages import _wait_traces

TIMEOUT = 20
RUN = "live-patch"

# Record each Dash callback response: the outputs it was for, its body.
_RECORD_JS = """
window.__responses = [];
const _fetch = window.fetch;
window.fetch = async function(url, opts) {
  const r = await _fetch.apply(this, arguments);
  if (String(url).includes('_dash-update-component')) {
    const output = JSON.parse(opts.body).output;
    r.clone().text().then(t => window.__responses.push([output, t]));
  }
  return r;
};
"""

_TRACES_JS = """
const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!gd || !gd.data) return null;
return {x: gd.data.map(t => Array.from(t.x || [])), y: gd.data.map(t => Array.from(t.y || [])),
        yrange: gd._fullLayout.yaxis.range, xrange: gd._fullLayout.xaxis.range};
"""


@pytest.fixture
def sliding_run(influx_client):
    """A run with 330 s of points up to now, kept live while the test runs."""
    now = time.time_ns() // NS * NS
    points, _ = make_points(RUN, now - 329 * NS, 330, events_per_s=200, seed=5)
    influx_client.write(points)
    with LiveWriter(influx_client, RUN, now + NS) as writer:
        yield writer


def _responses(dash_duo, graph: str) -> list[dict]:
    """Return the figure each recorded response sent for `graph` (a whole figure or a Patch), in order."""
    out = []
    for output, body in dash_duo.driver.execute_script("return window.__responses"):
        if f"{graph}.figure" in output:
            sent = json.loads(body)["response"].get(graph, {}).get("figure")
            if sent is not None:
                out.append({"figure": sent, "bytes": len(body), "figure_bytes": len(json.dumps(sent))})
    return out


def _in_layout(dash_duo, graph: str) -> dict:
    """Return the figure the page's layout (the pages router's response) brought for `graph`, as `_responses` does."""
    def find(node):
        if isinstance(node, dict):
            if node.get("props", {}).get("id") == graph:
                return node["props"].get("figure")
            return next((f for f in map(find, node.values()) if f is not None), None)
        if isinstance(node, list):
            return next((f for f in map(find, node) if f is not None), None)
        return None

    for output, body in dash_duo.driver.execute_script("return window.__responses"):
        if "_pages_content.children" in output and (sent := find(json.loads(body))) is not None:
            return {"figure": sent, "bytes": len(body), "figure_bytes": len(json.dumps(sent))}
    raise AssertionError(f"no layout brought {graph}")


def _is_patch(sent: dict) -> bool:
    return isinstance(sent, dict) and "__dash_patch_update" in sent


def test_a_live_tick_sends_the_new_points_only_and_keeps_the_users_zoom(dash_duo, influx_client, sliding_run,
                                                                      tmp_path):
    app = create_app(UiConfig(influx=influx_client.config, refresh_ms=1000, alerts_file=tmp_path / "rules.json"))
    dash_duo.start_server(app, port=_free_port())
    dash_duo.driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _RECORD_JS})
    dash_duo.driver.get(dash_duo.server_url + f"/run/{RUN}?range=5m")
    dash_duo.wait_for_contains_text("#job-summary", "live", timeout=TIMEOUT)
    _wait_traces(dash_duo, "job-throughput")
    traces = lambda: dash_duo.driver.execute_script(_TRACES_JS, "job-throughput")  # noqa: E731

    whole = _in_layout(dash_duo, "job-throughput")
    assert not _is_patch(whole["figure"]) and whole["figure"]["data"]          # the first load: the whole figure
    dash_duo._wait_for(lambda _d: any(_is_patch(r["figure"]) for r in _responses(dash_duo, "job-throughput")),
                       timeout=TIMEOUT, msg="no live tick sent a patch")

    # the user zooms the y axis (not the time axis, which would pick a range)
    dash_duo.driver.execute_script(
        "Plotly.relayout(document.querySelector('#job-throughput .js-plotly-plot'), {'yaxis.range': [0, 123456]})")
    first = traces()
    dash_duo.driver.execute_script("window.__responses = []")
    dash_duo._wait_for(lambda _d: len(_responses(dash_duo, "job-throughput")) >= 3, timeout=TIMEOUT,
                       msg="fewer than three live ticks sent the throughput chart")
    later = traces()

    ticks = _responses(dash_duo, "job-throughput")
    assert all(_is_patch(t["figure"]) for t in ticks), [t["figure"] for t in ticks]
    ops = [op["operation"] for t in ticks for op in t["figure"]["operations"]]
    assert "Extend" in ops and "Delete" in ops                               # new points in, the oldest out
    # a tick's figure is a few hundred bytes, the whole one tens of thousands; the response as a whole is smaller too
    assert max(t["figure_bytes"] for t in ticks) * 10 < whole["figure_bytes"], (whole["figure_bytes"], ticks)
    assert max(t["bytes"] for t in ticks) * 2 < whole["bytes"]

    # the chart was not reset: the window slid (same length, later ends), and the user's zoom stayed
    for x0, x1 in zip(first["x"], later["x"]):
        assert x1[-1] > x0[-1] and x1[0] > x0[0]
        assert abs(len(x1) - len(x0)) <= 2
        assert x1 == sorted(set(x1))                                         # no point twice, in order
    assert later["yrange"] == [0, 123456]

    # what the page holds after the patches is what a fresh load of the same seconds shows
    dash_duo.find_element("#job-refresh input[value='off']").click()
    time.sleep(1.5)                                                          # a tick in flight lands
    patched = traces()
    dash_duo.driver.get(dash_duo.server_url + f"/run/{RUN}?range=5m&refresh=off")
    _wait_traces(dash_duo, "job-throughput")
    fresh = traces()
    for xs_p, ys_p, xs_f, ys_f in zip(patched["x"], patched["y"], fresh["x"], fresh["y"]):
        at = dict(zip(xs_f, ys_f))
        common = [(x, y) for x, y in zip(xs_p[:-2], ys_p[:-2]) if x in at]   # the last seconds may still grow
        assert len(common) > 250
        assert all(at[x] == y for x, y in common)
