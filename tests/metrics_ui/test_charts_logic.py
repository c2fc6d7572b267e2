"""The pure parts behind the job and step charts (their reads: tests/collector/query/test_panels.py)."""
from __future__ import annotations

from dash import no_update

from metrics_ui import components as c
from metrics_ui import figures
from metrics_ui.plot import Figure, scatter
from collector.query.ranges import TimeRange

from .conftest import NS


def test_the_address_gives_the_range_and_refresh_or_a_reason():
    q = c.page_query({"range": "custom", "from": "2026-01-02T03:04:05Z", "to": "2026-01-02T04:00:00Z",
                      "refresh": "off"})
    assert (q.choice, q.from_date, q.from_time, q.to_date, q.to_time, q.refresh, q.error) == \
        ("custom", "2026-01-02", "03:04:05", "2026-01-02", "04:00:00", "off", None)
    assert c.page_query({"range": "1h"}) == c.PageQuery("1h") and c.page_query({"range": "run"}) == c.PageQuery("run")
    for bad, reason in (({"range": "7d"}, "unknown range '7d'"), ({"refresh": "0.1"}, "unknown refresh"),
                        ({"range": "custom"}, "pick a start date"),
                        ({"range": "custom", "from": "yesterday"}, "is not YYYY-MM-DDTHH:MM:SSZ"),
                        ({"range": "custom", "from": "2026-01-02T05:00:00Z", "to": "2026-01-02T04:00:00Z"},
                         "the end must be after the start"),
                        ({"range": ["5m", "1h"]}, None)):
        q = c.page_query(bad)
        assert q.choice == "run" and q.refresh == "1"
        assert (q.error is None) if reason is None else (reason in q.error), (bad, q.error)


def test_a_zoom_becomes_whole_utc_seconds():
    assert c.zoom_to_range({"xaxis.range[0]": "2026-01-02 03:04:05.7", "xaxis.range[1]": "2026-01-02 03:05:00.2"}) \
        == ("2026-01-02", "03:04:05", "2026-01-02", "03:05:01")
    assert c.zoom_to_range({"xaxis.range": ["2026-01-02 03:04:05", "2026-01-02 03:04:06"]}) is not None
    for other in (None, {"autosize": True}, {"xaxis.autorange": True}, {"yaxis.range[0]": 1, "yaxis.range[1]": 2},
                  {"xaxis.range[0]": "x", "xaxis.range[1]": "y"}, {"xaxis.range[0]": 3, "xaxis.range[1]": 4}):
        assert c.zoom_to_range(other) is None


def test_pause_and_rates():
    assert c.refresh_state("1", True) == (False, 1000)
    assert c.refresh_state("30", True) == (False, 30000)
    assert c.refresh_state("off", True)[0] is True
    assert c.refresh_state("1", False)[0] is True


def test_only_changed_outputs_are_built_and_sent():
    built = []

    def figure(y):
        def build():
            built.append(y)
            return Figure(data=[scatter(x=[1, 2], y=y)])
        return (tuple(y), build)

    first, digests = c.only_changed({"a": figure([3, 4]), "b": c.as_is("text")}, None)
    assert isinstance(first[0], Figure) and first[1] == "text" and built == [[3, 4]]
    again, same = c.only_changed({"a": figure([3, 4]), "b": c.as_is("other")}, digests)
    assert again == [no_update, "other"] and same["a"] == digests["a"] and built == [[3, 4]]   # not rebuilt
    third, _ = c.only_changed({"a": figure([3, 5]), "b": c.as_is("other")}, same)
    assert isinstance(third[0], Figure) and third[1] is no_update and built == [[3, 4], [3, 5]]


def test_latency_ticks_read_in_units():
    ticks, labels = figures.latency_ticks([0.2, 30.0])
    assert labels == ["200 µs", "500 µs", "1 ms", "2 ms", "5 ms", "10 ms", "20 ms"] and ticks[0] == 0.2
    _, labels = figures.latency_ticks([0.001, 20_000.0])                 # wide: decades only
    assert labels == ["1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s"]
    _, labels = figures.latency_ticks([8_000.0, 17_000.0])               # narrow: every digit
    assert labels == ["8 s", "9 s", "10 s"]
    assert figures.latency_ticks([13_020.0, 13_580.0])[1] == ["13 s", "13.6 s"]      # narrower: the ends
    assert figures.bin_label(0.0) == "" and figures.bin_label(0.004) == "<0.01 %"
    assert figures.bin_label(12.345) == "12.3 %"


def test_charts_show_the_range_from_the_runs_start():
    rng = TimeRange(100 * NS, 400 * NS)
    assert c.shown_range(rng, 350 * NS, 415 * NS) == TimeRange(350 * NS, 415 * NS)      # a run shorter than the range
    assert c.shown_range(rng, 50 * NS, 400 * NS) == rng                                  # a run longer than it
    assert c.shown_range(rng, 500 * NS, 400 * NS) == rng                                 # nothing of the run inside


def test_legend_clicks_are_kept_by_series_name_and_whole_figures_hide_those_series():
    fig = {"data": [{"name": "p50"}, {"name": "p99"}, {"name": "p99.9"}]}
    hidden = figures.legend_hidden([{"visible": ["legendonly"]}, [2]], fig, [])
    assert hidden == ["p99.9"]
    assert figures.legend_hidden([{"visible": ["legendonly"]}, [2]], fig, hidden) == ["p99.9"]     # once
    assert figures.legend_hidden([{"visible": "legendonly"}, [0, 1]], fig, hidden) == ["p99.9", "p50", "p99"]
    assert figures.legend_hidden([{"visible": [True]}, [2]], fig, hidden) == []
    for junk in (None, [], [{"line.color": ["red"]}, [0]], [{"visible": ["legendonly"]}, [7]], "x",
                 [{"visible": ["legendonly"]}, ["0"]]):
        assert figures.legend_hidden(junk, fig, ["p50"]) == ["p50"]                  # nothing else changes
    assert figures.legend_hidden([{"visible": ["legendonly"]}, [0]], None, []) == []
    built = Figure(data=[scatter(x=[1], y=[1], name=n) for n in ("p50", "p99", "p99.9")])
    out = figures.hide_series(built, ["p99.9", "gone"])
    assert [t.get("visible") for t in out.data] == [None, None, "legendonly"]
