"""Plotly figures as the plain JSON plotly.js reads, built without plotly.py's figure objects.

A `go.Figure` validates every property it is given and every nested update against
plotly's schema, which made up three quarters of a job page's layout time on the server
(docs/PERFORMANCE.md, "Figures as plain dicts"). The dashboard's figures use a few trace
and layout properties, all covered by its tests and drawn in Chromium by the UI tests, so
they are built here as dicts: `Figure` is the dict `{"data": [...], "layout": {...}}` that
dcc.Graph takes, with the handful of helpers the builders need.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


#: Properties whose parts may be given as `part_sub=...` (plotly.py's "magic underscore"): `xaxis_title`.
_COMPOUND = frozenset({"xaxis", "yaxis", "yaxis2", "margin", "legend", "title", "font", "marker", "line"})


def _expand(props: Mapping) -> dict:
    """Return `props` with `xaxis_title="t"` written as `xaxis={"title": "t"}` (only for `_COMPOUND` heads)."""
    out: dict = {}
    for k, v in props.items():
        head, _, rest = k.partition("_")
        if rest and head in _COMPOUND:
            part = out.setdefault(head, {})
            if isinstance(part, dict):
                merge(part, _expand({rest: v}))
                continue
        if isinstance(out.get(k), dict) and isinstance(v, Mapping):
            merge(out[k], v)
        else:
            out[k] = v
    return out


def _clean(value):
    """Return `value` without None entries at any depth (plotly.py's "unset"), titles as {"text": ...}."""
    if isinstance(value, Mapping):
        return {k: _title(k, _clean(v)) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def plain_text(text: str) -> str:
    """Return `text` escaped for plotly.js, which draws names and titles as a subset of HTML.

    A query named `<a href=...>` would otherwise be a live link in a legend; escaped, it is
    drawn as the characters typed.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _title(key: str, value):
    return {"text": plain_text(value)} if key == "title" and isinstance(value, str) else value


def _named(props: dict) -> dict:
    if isinstance(props.get("name"), str):
        props["name"] = plain_text(props["name"])
    return props


def merge(into: dict, props: Mapping) -> dict:
    """Merge `props` into `into` in place, nested dicts key by key (as `update_layout` does); None unsets."""
    for k, v in props.items():
        if v is None:
            into.pop(k, None)
            continue
        v = _title(k, v)
        if isinstance(v, Mapping) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = _clean(v)
    return into


def scatter(**props) -> dict:
    """Return a scatter trace (lines, markers, text)."""
    return {"type": "scatter", **_named(_clean(_expand(props)))}


def bar(**props) -> dict:
    """Return a bar trace."""
    return {"type": "bar", **_named(_clean(_expand(props)))}


def iso_times(times_ns: Sequence[int]) -> list[str]:
    """Return epoch nanoseconds as the UTC date strings plotly.js reads (µs precision)."""
    return np.datetime_as_string(np.asarray(times_ns, dtype="datetime64[ns]"), unit="us").tolist()


class Figure(dict):
    """A figure as plotly.js's JSON: a dict of `data` (traces) and `layout`, sent to dcc.Graph as is."""

    def __init__(self, layout: Mapping | None = None, data: Sequence[dict] = ()):
        layout = layout or {}
        super().__init__(data=list(data), layout=merge({}, {k: v for k, v in layout.items() if k != "template"}))
        if "template" in layout:
            self["layout"]["template"] = layout["template"]      # shared by every figure, never changed

    @property
    def data(self) -> list[dict]:
        return self["data"]

    @property
    def layout(self) -> dict:
        return self["layout"]

    def add_trace(self, trace: dict) -> Figure:
        self["data"].append(trace)
        return self

    def update_layout(self, **props) -> Figure:
        merge(self["layout"], _expand(props))
        return self

    def add_shape(self, **props) -> Figure:
        self["layout"].setdefault("shapes", []).append(_clean(props))
        return self

    def add_annotation(self, **props) -> Figure:
        self["layout"].setdefault("annotations", []).append(_clean(props))
        return self

    def to_plotly_json(self) -> dict:
        """Return the figure itself: it already is plotly.js's JSON (Dash's encoder asks for this)."""
        return self
