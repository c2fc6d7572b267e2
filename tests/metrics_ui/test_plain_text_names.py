"""Names users choose (queries, runs) show as text in charts, never as Plotly's HTML subset.

plotly.js draws a trace's name (legend, hover) and titles with a subset of HTML: `<a href>`
becomes a live link, `<b>`/`<span style>` styled text. Escaped (`&lt;`, `&amp;`), the name
is drawn as the characters typed.
"""
from __future__ import annotations

from collector.query.series import TimeSeries
from metrics_ui.figures import throughput_figure
from metrics_ui.query_figures import lines_figure

HOSTILE = '<a href="https://evil.example">q</a><b style="font-size:99px">&x</b>'
ESCAPED = '&lt;a href="https://evil.example"&gt;q&lt;/a&gt;&lt;b style="font-size:99px"&gt;&amp;x&lt;/b&gt;'


def _series(name: str) -> TimeSeries:
    return TimeSeries(name, (1_700_000_000_000_000_000, 1_700_000_001_000_000_000), (1.0, 2.0))


def test_trace_names_and_titles_are_escaped():
    for fig in (throughput_figure([_series(HOSTILE), _series("plain")], title=f"Throughput {HOSTILE}"),
                lines_figure([_series(HOSTILE)], f"rows of {HOSTILE}", "rows/s", "rows/s")):
        names = [t["name"] for t in fig.data]
        assert ESCAPED in " ".join(names) and all("<" not in n for n in names)
        assert fig.layout["title"]["text"].endswith(ESCAPED)
    plain = throughput_figure([_series("q-1.a")], title="Throughput")
    assert plain.data[0]["name"] == "q-1.a" and plain.layout["title"]["text"] == "Throughput"
