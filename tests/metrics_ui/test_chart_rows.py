"""The job page's folding rows: the address' `open=` and which rows a run opens at first."""
from __future__ import annotations

import pytest

from metrics_ui import chart_rows as rows

NAMES = ("batches", "sources", "backpressure", "spark", "state", "executors", "ingress")


def test_open_rows_from_the_address():
    assert rows.parse_open(None, NAMES) is None and rows.parse_open("", NAMES) is None
    assert rows.parse_open("sources,state", NAMES) == {"sources", "state"}
    assert rows.parse_open(" sources , ,state ", NAMES) == {"sources", "state"}
    assert rows.parse_open("none", NAMES) == frozenset()                 # every row folded
    assert rows.parse_open(["sources"], NAMES) is None                     # not text: as if absent


def test_an_unknown_row_is_named_and_cut_short():
    with pytest.raises(ValueError, match=r"unknown row 'x' in the address: open= takes batches, sources, backpressure"):
        rows.parse_open("sources,x", NAMES)
    with pytest.raises(ValueError) as e:
        rows.parse_open("<script>" + "a" * 500, NAMES)
    assert len(str(e.value)) < 200


def test_mounted_charts_follow_the_row():
    made = rows.mounted(True, lambda: ["chart"], ("a",))
    assert made[0] == (True, ("a",)) and made[1]() == ["chart"]
    folded = rows.mounted(False, lambda: ["chart"])
    assert folded[0] == (False, ()) and folded[1]() == []


def test_a_run_opens_the_rows_that_say_whether_it_keeps_up():
    from metrics_ui.app import UiConfig, create_app
    from collector.influx import InfluxConfig
    from collector.influx.server import free_port
    create_app(UiConfig(influx=InfluxConfig(url=f"http://127.0.0.1:{free_port()}", db="none")))
    from metrics_ui.pages import job
    # any run: its batches against the trigger and its input rate against its processing rate, and the
    # busy share and backlog per step only when it records steps and wrote backpressure: by data, not by job
    assert job.default_open({"stepless": True, "backpressure": True}) == {"batches", "sources"} == job.default_open(None)
    assert job.default_open({"stepless": False, "backpressure": False}) == {"batches", "sources"}
    assert job.default_open({"stepless": False, "backpressure": True}) == {"batches", "sources", "backpressure"}
    assert set(job.ROWS) == set(NAMES) and list(job.ROWS) == list(NAMES)          # page order
