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
