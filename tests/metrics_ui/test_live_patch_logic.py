"""A live chart's update as a Patch of its new points (figures.figure_patch), without a browser.

The Patch is applied here the way dash-renderer applies it (each operation at its location,
in order), so the test checks that the page ends up with exactly the new figure.
"""
from __future__ import annotations

import copy
import json

import plotly.io as pio
from plotly.io.json import to_json_plotly
from flask import Flask

from collector.query.ranges import TimeRange
from metrics_ui import components as c
from metrics_ui import figures
from collector.query.series import TimeSeries
from collector.units import NS

T0 = 1_700_000_000 * NS


def _apply(figure: dict, patch) -> dict:
    """Apply a Dash Patch to a JSON figure the way dash-renderer does."""
    out = copy.deepcopy(figure)
    for op in json.loads(to_json_plotly(patch.to_plotly_json()))["operations"]:
        *path, last = op["location"]
        node = out
        for key in path:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
        kind, value = op["operation"], op["params"].get("value")
        if kind == "Assign":
            node[last] = value
        elif kind == "Delete":
            del node[last]
        elif kind == "Extend":
            node[last] = list(node[last]) + list(value)
        else:
            raise AssertionError(f"unexpected operation {kind}")
    return out


def _json(fig) -> dict:
    return json.loads(pio.to_json(fig))


def _throughput(start_s: int, n: int, last: float | None = None, shown: int = 300):
    series = []
    for name, base in (("nbbo", 1000.0), ("orders", 2000.0)):
        values = [base + i for i in range(start_s, start_s + n)]
        if last is not None:
            values[-1] = last
        series.append(TimeSeries(name, tuple(T0 + i * NS for i in range(start_s, start_s + n)), tuple(values)))
    fig = figures.throughput_figure(series)
    rng = TimeRange(T0 + (start_s + n - shown) * NS, T0 + (start_s + n) * NS)
    return figures.time_axes(fig, rng, "run-1")


def test_a_sliding_window_goes_as_the_points_dropped_and_appended():
    old, new = _throughput(0, 300), _throughput(2, 300)          # two seconds later: 2 out, 2 in
    patch = figures.figure_patch(old.to_plotly_json(), new.to_plotly_json())
    assert patch is not None
    assert _apply(_json(old), patch) == _json(new)
    assert len(to_json_plotly(patch.to_plotly_json())) < len(pio.to_json(new)) / 5


def test_a_revised_last_point_is_replaced_and_style_changes_go_whole():
    old, new = _throughput(0, 300), _throughput(1, 300, last=5.0)
    patch = figures.figure_patch(old.to_plotly_json(), new.to_plotly_json())
    assert _apply(_json(old), patch) == _json(new)
    # another set of series, or one of a new style, is a new figure
    assert figures.figure_patch(old.to_plotly_json(), figures.empty_figure("t").to_plotly_json()) is None
    restyled = _throughput(1, 300)
    for trace in restyled.data:
        trace["line"]["width"] = 5
    assert figures.figure_patch(old.to_plotly_json(), restyled.to_plotly_json()) is None
    # most points new (a jump of the window): whole
    assert figures.figure_patch(old.to_plotly_json(), _throughput(250, 300).to_plotly_json()) is None


def test_the_memo_patches_only_from_the_figure_the_page_says_it_holds():
    memo = c.FigureMemo(size=4)
    old, new = _throughput(0, 300), _throughput(1, 300)
    whole = lambda sent, fig: isinstance(sent, dict) and sent["data"] and _json(sent) == _json(fig)  # noqa: E731
    assert whole(memo.send("job:throughput", None, "d1", old), old)           # first load: whole
    assert type(memo.send("job:throughput", "d1", "d2", new)).__name__ == "Patch"   # a tick: a Patch
    assert whole(memo.send("job:throughput", "unknown", "d3", new), new)      # a figure it never sent: whole


def test_only_changed_sends_a_patch_on_a_tick_and_the_whole_figure_otherwise():
    app = Flask(__name__)
    with app.app_context():
        first, digests = c.only_changed({"t": ((0,), lambda: _throughput(0, 300))}, None, patch=("t",), scope="x")
        assert first[0]["data"]
        tick, digests2 = c.only_changed({"t": ((1,), lambda: _throughput(1, 300))}, digests, patch=("t",), scope="x")
        assert type(tick[0]).__name__ == "Patch"
        picked, _ = c.only_changed({"t": ((2,), lambda: _throughput(2, 300))}, digests2, patch=("t",), scope="x",
                                   tick=False)
        assert picked[0]["data"]
