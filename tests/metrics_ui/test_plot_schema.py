"""The figures built as plain dicts (metrics_ui/plot.py) are what plotly.py itself would send.

Each builder's figure goes through plotly.py's validation (`go.Figure(fig)` refuses any
property plotly.js does not know, or a value of the wrong kind), and plotly.py's JSON of
it equals the dict's own: no title left a bare string, no None sent, nothing it would add.
"""
from __future__ import annotations

import json

import numpy as np
import plotly.graph_objects as go
import pytest
from plotly.io.json import to_json_plotly

from collector.bins import UiBin
from collector.histogram import LatencyHistogram
from collector.query.panels import BatchView, IngressView, Marker
from collector.query.ranges import TimeRange
from collector.query.series import TimeSeries
from collector.query.spark_panels import ExecutorView, QueryBatchView, StateView
from metrics_ui import compare_figures, figures, query_figures
from metrics_ui.plot import Figure, bar, merge, scatter

NS = 10**9
T0 = 1_796_000_000 * NS


def _series(name: str, n: int = 30, scale: float = 1.0) -> TimeSeries:
    return TimeSeries(name, tuple(T0 + i * NS for i in range(n)), tuple(scale * (1 + i % 7) for i in range(n)))


def _hist() -> LatencyHistogram:
    h = LatencyHistogram()
    h.record(np.array([1_000_000, 2_000_000, 40_000_000], dtype=np.int64))
    return h


def _figures() -> dict[str, Figure]:
    rng, marks = TimeRange(T0, T0 + 40 * NS), [Marker(T0 + 5 * NS, "start", "started"), Marker(T0 + 9 * NS, "rescale", "x")]
    two = [_series("nbbo"), _series("orders")]
    batch = BatchView(30, _series("slowest batch"), [_series("addBatch"), _series("getBatch")])
    ingress = IngressView([_series("truncated frame")], 30, _series("muted", scale=0.1), 3.0, 2)
    qbatch = QueryBatchView(30, 3, 30, 1000, _series("mean"), _series("slowest"), _series("trigger"),
                            _series("overran", scale=0.1))
    state = StateView([], [_series("op 0")], [], [], _series("watermark delay"))
    execs = ExecutorView("app-1", [], [_series("driver")], [_series("driver")], [_series("driver")],
                         [_series("driver")], [], [])
    heap, work = query_figures.executor_figures(execs)
    built = {
        "throughput": figures.time_axes(figures.throughput_figure(two), rng, "rev", marks),
        "percentiles": figures.percentiles_over_time_figure([_series("p50", scale=1e6), _series("p99", scale=1e7)], "p"),
        "busy": figures.busy_share_figure(two, two, "busy", order=("nbbo", "orders")),
        "backlog": figures.backlog_figure(two, "backlog"),
        "bins": figures.bins_figure([UiBin("< 1 ms", 3, 60.0), UiBin("< 10 ms", 2, 40.0)]),
        "batches": figures.batch_figure(batch),
        "bad": figures.bad_frames_figure(ingress),
        "muted": figures.muted_figure(ingress),
        "curve": figures.percentile_curve_figure(_hist(), {50.0: 2_000_000, 99.0: 40_000_000}),
        "empty": figures.empty_figure("nothing", "no data"),
        "sources": query_figures.sources_figure(two, two, [_series("nbbo")], "sources"),
        "trigger": query_figures.batch_trigger_figure(qbatch, "batches"),
        "state": query_figures.state_figure(state, "state"),
        "heap": heap, "work": work,
    }
    figures.hide_series(built["throughput"], ["orders"])
    return built


@pytest.mark.parametrize("name", list(_figures()))
def test_each_figure_passes_plotlys_validation_unchanged(name):
    fig = _figures()[name]
    assert isinstance(fig, dict) and set(fig) == {"data", "layout"}
    checked = go.Figure(fig)                                  # raises on a property plotly.js does not know
    ours, theirs = json.loads(to_json_plotly(fig)), json.loads(to_json_plotly(checked))
    assert ours == theirs


def test_compare_figures_pass_too():
    empty = compare_figures.latency_overlay_figure([])
    go.Figure(empty)
    assert empty["layout"]["annotations"][0]["text"] == compare_figures.NO_RUNS


def test_layout_updates_merge_nested_parts_and_none_unsets():
    fig = Figure(layout={"margin": {"l": 1, "b": 2}, "height": 100})
    fig.update_layout(title="t", xaxis_title="time", margin_b=9, uirevision=None, height=None)
    assert fig.layout == {"margin": {"l": 1, "b": 9}, "title": {"text": "t"}, "xaxis": {"title": {"text": "time"}}}
    trace = scatter(x=[1], y=[2], line=dict(color="red", dash=None), marker_color="blue")
    assert trace == {"type": "scatter", "x": [1], "y": [2], "line": {"color": "red"}, "marker": {"color": "blue"}}
    assert bar(x=[1], y=[1])["type"] == "bar"
    assert merge({"a": {"b": 1}}, {"a": {"c": 2}}) == {"a": {"b": 1, "c": 2}}
