"""Pure table and figure helpers of the dashboard: compact cells, legend room, label headroom."""
from __future__ import annotations

import math

import numpy as np

from collector.histogram import LatencyHistogram
from metrics_ui import figures
from metrics_ui.components import fmt_duration
from collector.query.series import TimeSeries


def test_durations_are_compact_in_their_two_largest_units():
    assert [fmt_duration(s) for s in (0, 27.4, 59.6, 60, 725, 3599, 3600, 11_220, 86_399, 90_061)] == [
        "0 s", "27 s", "1 min 00 s", "1 min 00 s", "12 min 05 s", "59 min 59 s", "1 h 00 min", "3 h 07 min",
        "23 h 59 min", "1 d 01 h"]


def test_multi_series_legends_sit_at_the_foot_and_grow_the_figure_by_rows():
    series = [TimeSeries(f"s{i}", (0, 10**9), (1.0, 2.0)) for i in range(9)]
    busy = figures.busy_share_figure(series[:5], series[:4], "busy")
    legend = busy.layout["legend"]
    assert (legend["yref"], legend["yanchor"], legend["y"]) == ("container", "bottom", 0)
    assert busy.layout["height"] == 320 + 2 * 20                     # 9 entries: three rows of four
    assert figures.backlog_figure(series[:2], "backlog").layout["height"] == 320


def test_percentile_curve_leaves_room_above_its_highest_label():
    hist = LatencyHistogram.from_values(np.array([20_000_000_000] * 999 + [26_000_000_000]))
    marks = hist.percentiles((50.0, 99.9, 99.99))
    fig = figures.percentile_curve_figure(hist, marks)
    low, high = fig.layout["yaxis"]["range"]
    top = math.log10(max(marks.values()) / 1e6)
    assert high - top >= 0.15 * (high - low)                        # a flat tail: labels stay in the plot
    assert fig.data[1]["cliponaxis"] is False
