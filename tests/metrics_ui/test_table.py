"""Tables as one component: cells as data, and html components for a cell it cannot draw."""
from dash import dcc, html

from metrics_ui import components as c
from metrics_ui import table


def test_text_links_and_spans_become_data():
    rows = [["a", 3, None, dcc.Link("run <1>", href="/run/run%20%3C1%3E"),
             html.Span([c.fmt_latency(1_500_000), html.Span(" sink", className="step-name")], title="p99 of step sink"),
             html.Span("OK", className="bp bp-ok")]]
    assert table.cells(rows) == [["a", "3", "", {"href": "/run/run%20%3C1%3E", "text": "run <1>"},
                                  {"title": "p99 of step sink", "parts": [c.fmt_latency(1_500_000), {"class": "step-name", "text": " sink"}]},
                                  {"class": "bp bp-ok", "text": "OK"}]]
    t = c.table(["x"] * 6, rows, "t-table")
    assert isinstance(t, table.Table)
    assert t.to_plotly_json()["namespace"] == "ms_components"
    assert t.id == "t-table" and t.className == "data-table" and t.rows == table.cells(rows)


def test_any_other_component_keeps_html_components():
    rows = [["a", html.Button("delete", id="x")]]
    assert table.cells(rows) is None
    assert isinstance(c.table(["name", ""], rows), html.Table)


def test_no_rows_shows_the_empty_text():
    t = c.table(["a", "b"], [], empty="no such run")
    assert isinstance(t, table.Table) and t.rows == [] and t.empty == "no such run"


def test_the_browser_draws_text_as_text_and_links_only_to_the_dashboard(dash_duo):
    """Hostile text stays text, a link off the dashboard is no link, a local one moves without a reload."""
    import dash
    from collector.influx.server import free_port
    from metrics_ui.app import STATIC_DIR

    from dash import _callback
    _callback.GLOBAL_CALLBACK_LIST.clear()      # page callbacks an earlier dashboard in this process left
    _callback.GLOBAL_CALLBACK_MAP.clear()
    app = dash.Dash(__name__, assets_folder=str(STATIC_DIR))
    rows = [[html.Span('<img src=x onerror="window.__pwned=1">', className="x"),
             dcc.Link("script", href="javascript:window.__pwned=2"),
             dcc.Link("elsewhere", href="//evil.example/run"),
             dcc.Link("back", href="\\/evil.example"),
             dcc.Link("step", href="/step/a%20b/sink")]]
    app.layout = html.Div([dcc.Location(id="where"), html.Div(id="path"),
                           c.table(["a", "b", "c", "d", "e"], rows, "hostile-table")])

    @app.callback(dash.Output("path", "children"), dash.Input("where", "pathname"))
    def _path(pathname):
        return f"at {pathname}"

    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_text_to_equal("#path", "at /", timeout=15)
    cells = dash_duo.find_elements("#hostile-table td")
    assert [td.text for td in cells] == ['<img src=x onerror="window.__pwned=1">', "script", "elsewhere", "back", "step"]
    assert not dash_duo.find_elements("#hostile-table img")
    links = dash_duo.find_elements("#hostile-table a")
    assert [a.get_attribute("href") for a in links] == [f"{dash_duo.server_url}/step/a%20b/sink"]
    dash_duo.driver.execute_script("window.__kept = 1")
    links[0].click()
    dash_duo.wait_for_text_to_equal("#path", "at /step/a%20b/sink", timeout=10)
    assert dash_duo.driver.execute_script("return [window.__kept, window.__pwned]") == [1, None]
    assert dash_duo.get_logs() == []
