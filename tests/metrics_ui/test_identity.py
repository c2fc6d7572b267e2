"""The product says what it is: a monitor for Spark Structured Streaming, Market Spread its demo job."""
from __future__ import annotations

import re
from pathlib import Path

import dash

from collector.influx import InfluxConfig
from collector.query.series import counts_events, step_order
from metrics_ui import auth, components
from metrics_ui.app import UiConfig, create_app

ROOT = Path(__file__).resolve().parents[2]


def test_every_page_title_and_the_dashboard_name_the_product():
    app = create_app(UiConfig(influx=InfluxConfig(url="http://127.0.0.1:9"), refresh_ms=1000))
    titles = {p["name"]: p["title"] for p in dash.page_registry.values()}
    assert titles == {name: f"{name if name != 'Compare' else 'Compare runs'} · Spark streaming monitor"
                      for name in ("Runs", "Run", "Step", "Compare", "Alerts")}
    assert app.title == components.PRODUCT == auth.REALM == "Spark streaming monitor"
    assert not any("Market Spread" in t for t in titles.values())


def test_the_readme_opens_on_the_product_with_market_spread_as_its_demo():
    head, first = ROOT.joinpath("README.md").read_text().split("\n\n", 2)[:2]
    assert head == "# Spark streaming monitor"
    assert first.startswith("A monitor for Spark Structured Streaming jobs") and "demo job" in first


def test_no_page_or_read_tells_jobs_apart_by_their_names_or_units():
    """What a run shows follows from what it declares and the data it has: nothing asks which job it is."""
    sniffing = re.compile(r"""is_market_spread|_generic\(|[!=]=\s*["']events/s["']|["']events/s["']\s*[!=]=|"""
                          r"""\bin\s*\(?STEP_CHECK|\bin\s*\(?STEP_INGRESS|["']generic["']""")
    files = [*ROOT.joinpath("metrics_ui").rglob("*.py"), *ROOT.joinpath("collector", "query").glob("*.py")]
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files
             for i, line in enumerate(p.read_text().splitlines(), 1) if sniffing.search(line)]
    assert not found, "\n".join(found)


def test_step_order_and_counting_follow_the_data():
    declared = step_order(("parse", "enrich"), {"enrich": 2, "parse": 3, "extra": 1})
    assert declared == ("parse", "enrich", "extra")                      # the job's order, then the rest as seen
    seen = {"start-to-end": 1, "sink": 1, "check_market_data": 1, "source": 1, "ingress": 1, "mine": 0}
    assert step_order((), seen) == ("ingress", "source", "check_market_data", "sink", "mine", "start-to-end")
    assert counts_events(seen) and not counts_events({"parse": 1, "sink": 2})
