"""The dashboard's tables as one Dash component each, drawn by static/tables.js.

A table of `html.Td` is a Dash component per cell, and Dash's renderer wraps each in its
own React components: a Market Spread job page's 345 components were 210 of its tables.
`Table` sends a table as data instead, its header and rows of cells, and the browser makes
the same `<table>` markup (classes included) in one component. A cell is text, or a
`dcc.Link` or `html.Span` of text (spans may nest), sent as `{text | parts, class, title,
href}`; a row with any other component keeps the table in html components (`cells` says
which).
"""
from __future__ import annotations

from collections.abc import Sequence
from numbers import Number

from dash import dcc, html
from dash.development.base_component import Component

Cell = str | dict


class Table(Component):
    """`<table>` with a header row and rows of cells (see the module)."""
    _children_props: list[str] = []
    _base_nodes: list[str] = []
    _namespace = "ms_components"
    _type = "Table"

    def __init__(self, header: Sequence[str], rows: Sequence[Sequence[Cell]], empty: str = "",
                 className: str | None = None, id: str | None = None):      # noqa: A002 - Dash's prop
        self._prop_names = ["id", "header", "rows", "empty", "className"]
        self._valid_wildcard_attributes: list[str] = []
        self.available_properties = list(self._prop_names)
        self.available_wildcard_properties: list[str] = []
        args = {"header": list(header), "rows": [list(r) for r in rows], "empty": empty}
        if className is not None:
            args["className"] = className
        if id is not None:
            args["id"] = id
        super().__init__(**args)


def cell(value) -> Cell | None:
    """A cell as data, or None for a component `Table` cannot draw."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Number):
        return str(value)
    if isinstance(value, (dcc.Link, html.Span)):
        spec: dict = {}
        for prop, key in (("className", "class"), ("title", "title")):
            if getattr(value, prop, None):
                spec[key] = str(getattr(value, prop))
        if isinstance(value, dcc.Link):
            spec["href"] = str(value.href)
        kids = getattr(value, "children", None)
        if isinstance(kids, (list, tuple)):
            parts = [cell(k) for k in kids]
            if any(p is None for p in parts):
                return None
            spec["parts"] = parts
        else:
            text = cell(kids)
            if not isinstance(text, str):
                return None
            spec["text"] = text
        return spec
    return None


def cells(rows: Sequence[Sequence]) -> list[list[Cell]] | None:
    """Every row's cells as data, or None if any cell is a component `Table` cannot draw."""
    out = []
    for r in rows:
        row = [cell(v) for v in r]
        if any(v is None for v in row):
            return None
        out.append(row)
    return out
