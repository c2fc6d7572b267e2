"""The floor under every dashboard page on a machine: a Dash page holding one 3-point chart.

`bench.ui_query_pages` times it beside the real pages, so a recording says how much of a
page's time is Dash, React and plotly.js starting in the browser, which no page can go
under, and how much is the page. Two forms:

- `defaults`: Dash as it comes (its whole plotly.js, loaded when the graph mounts);
- `tuned`: with the dashboard's loading (`metrics_ui`: compressed responses, plotly.js's
  basic bundle preloaded and run while the layout travels, the trimmed polyfill).

    python -m bench.ui_floor --port 8070 --form tuned     # serves it: http://127.0.0.1:8070/run/floor

The page is served at `FLOOR_PATH`, under `/run/`, where the dashboard's chart pages are, by
the dashboard's own server (waitress, `metrics_ui.serve`).
"""
from __future__ import annotations

import dash
from dash import dcc, html
from flask import Flask

from metrics_ui import compress, plotly_bundle, polyfill

FORMS = ("defaults", "tuned")
FLOOR_PATH = "/run/floor"


def create_app(form: str) -> dash.Dash:
    """Return the floor app: one heading and one graph of a 3-point scatter, in `form`."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}: one of {', '.join(FORMS)}")
    server = Flask(__name__)
    tuned = form == "tuned" and plotly_bundle.usable()
    if tuned:
        compress.install(server)
        plotly_bundle.install(server)
        polyfill.install(server)
    app = dash.Dash(__name__, server=server, title="floor")
    if tuned:
        app.index_string = plotly_bundle.with_early_loading(app.index_string)
    figure = {"data": [{"type": "scatter", "x": [1, 2, 3], "y": [1, 3, 2]}], "layout": {"title": {"text": "floor"}}}
    app.layout = html.Div([html.H2("floor"), dcc.Graph(id="floor-graph", figure=figure)])
    return app
