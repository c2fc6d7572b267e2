"""Folding rows of charts: a row's charts exist in the page only while the row is open.

Each chart costs the browser a plotly.js draw and two resizes after it, and a job page
of a dozen charts spent most of its load drawing charts below the fold. So, as Spark's
UI does with its event timeline and Grafana with its rows, the job page opens with the
charts that say most, and every other row's charts wait folded under their figures'
tables until the user opens the row. Opening one makes its charts with their figures in
one answer (the page's panel callback); while it is open they get later figures by id,
as Patches on a refresh tick (`figures_callback`); closing it unmounts them. The address
names the open rows (`open=`), so a view is shared as it is seen.
"""
from __future__ import annotations

import json
from typing import Callable, Iterable, Mapping, Sequence

from dash import Input, Output, State, callback, clientside_callback, dcc, html, no_update

from metrics_ui.components import only_changed

#: Parts of a row: its frame, its toggle, the store of its state, the div its charts mount in,
#: the store of their figures' digests.
ROW, TOGGLE, OPEN, CHARTS, DIGESTS = "-row", "-toggle", "-open", "-charts", "-digests"
_HIDDEN = {"display": "none"}
#: What the address says when the user has folded every row.
NONE = "none"

# Clientside: a click on a row's title folds or unfolds it at once; the page's callbacks follow its state.
_TOGGLE_JS = """
function(_n, isOpen) {
    const open = !isOpen;
    return [open, 'chart-row-toggle' + (open ? ' open' : '')];
}
"""


def parse_open(value: object, names: Sequence[str]) -> frozenset[str] | None:
    """Read the address' `open=a,b` (the open rows; `none`: all folded); None when it has none.

    Raises ValueError naming the rows there are when it names another.
    """
    if not isinstance(value, str) or not value:
        return None
    asked = [v.strip() for v in value[:200].split(",") if v.strip()]
    unknown = [v for v in asked if v not in names and v != NONE]
    if unknown:
        raise ValueError(f"unknown row {unknown[0][:40]!r} in the address: open= takes {', '.join(names)} or {NONE}")
    return frozenset(v for v in asked if v != NONE)


def row_layout(row: str, label: str, is_open: bool, charts: Sequence = (), grid: bool = False,
               style: dict | None = None) -> html.Div:
    """Return a row under its title, which folds and unfolds it; its charts (made by the page when it is
    open) in a div of their own."""
    is_open = bool(is_open)
    return html.Div([html.Button(label, id=row + TOGGLE, n_clicks=0, title="show or hide these charts",
                                 className="chart-row-toggle" + (" open" if is_open else "")),
                     dcc.Store(id=row + OPEN, data=is_open),
                     html.Div(list(charts), id=row + CHARTS, className="grid2" if grid else None)],
                    id=row + ROW, className="chart-row", style=style)


def toggle_callback(row: str) -> None:
    """Register the clientside callback that folds and unfolds a row when its title is clicked."""
    clientside_callback(_TOGGLE_JS, Output(row + OPEN, "data"), Output(row + TOGGLE, "className"),
                        Input(row + TOGGLE, "n_clicks"), State(row + OPEN, "data"), prevent_initial_call=True)


def address_callback(rows: Mapping[str, str], output: str) -> None:
    """Register the clientside callback that writes the open rows into the page's address (`open=`),
    once the user folds or unfolds one: a shared address opens the same rows."""
    names = json.dumps(list(rows))
    clientside_callback(
        """
function(...opens) {
    const names = %s;
    const q = new URLSearchParams(window.location.search);
    const open = names.filter((n, i) => opens[i]);
    q.set('open', open.length ? open.join(',') : '%s');
    window.history.replaceState(window.history.state, '', window.location.pathname + '?' + q.toString());
    return open.join(',');
}
""" % (names, NONE), Output(output, "data"), *(Input(row + OPEN, "data") for row in rows.values()),
        prevent_initial_call=True)


def graphs(row: str, figs: Mapping[str, object], digests: Mapping[str, str], ids: Sequence[str] = ()) -> list:
    """Return a row's charts as graphs made with their first figures, and the store of those figures' digests.

    The next answer sends a chart only when its figure changed, as a Patch of the one it holds.
    `ids`: every chart the row can have; one without figures is an empty hidden graph, there only
    for the row's figures callback, whose outputs must all exist.
    """
    if not figs:
        return []
    absent = [dcc.Graph(id=graph, style=_HIDDEN, config={"staticPlot": True}) for graph in ids if graph not in figs]
    return [*(dcc.Graph(id=graph, figure=fig) for graph, fig in figs.items()), *absent,
            dcc.Store(id=row + DIGESTS, data=digests)]


def make(row: str, parts: Mapping[str, tuple[object, Callable[[], object]]], scope: str,
         ids: Sequence[str] = ()) -> list:
    """Return a row's charts made from `only_changed` entries by graph id, remembered for the next Patch
    (`ids`: every chart the row can have, `graphs`)."""
    figs, digests = only_changed(parts, None, patch=tuple(parts), scope=scope, tick=False)
    return graphs(row, dict(zip(parts, figs)), digests, ids)


def mounted(is_open: object, make_charts: Callable[[], list], what: Iterable = ()) -> tuple[object, Callable[[], list]]:
    """Return the `only_changed` entry of a row's charts div: made when the row opens (or `what` it charts
    changes), emptied when it closes."""
    is_open = bool(is_open)
    return (is_open, tuple(what)), (make_charts if is_open else list)


def figures_callback(row: str, graph_ids: Sequence[str], parts_of: Callable[[dict, str], Mapping | None],
                     window: str, run: str, scope: str) -> Callable:
    """Register the callback that sends an open row's later figures to its mounted charts.

    `parts_of(window, run)` gives the `only_changed` entries by graph id (None: nothing to
    send: InfluxDB failed), of some of `graph_ids` when a row has only some of its charts
    (the others are hidden placeholders, `graphs`). Its outputs exist only while the row is
    open, and Dash calls it only then. A figure goes as a Patch on a refresh tick, else whole.
    """
    @callback(*(Output(g, "figure") for g in graph_ids), Output(row + DIGESTS, "data"),
              Input(window, "data"), State(run, "data"), State(row + DIGESTS, "data"), prevent_initial_call=True)
    def refresh_row(win, run_id, digests):
        parts = parts_of(win, run_id) if isinstance(win, dict) and "empty" not in win else None
        if parts is None or not parts or not set(parts) <= set(graph_ids):
            return (no_update,) * (len(graph_ids) + 1)
        shown = [g for g in graph_ids if g in parts]
        changed, new = only_changed({g: parts[g] for g in shown}, digests, patch=tuple(shown), scope=scope,
                                    tick=bool(win.get("tick")))
        sent = dict(zip(shown, changed))
        return (*(sent.get(g, no_update) for g in graph_ids), new)
    return refresh_row
