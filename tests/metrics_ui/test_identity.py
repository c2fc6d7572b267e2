"""The product says what it is: a monitor for Spark Structured Streaming, Market Spread its demo job."""
from __future__ import annotations

from pathlib import Path

import dash

from collector.influx import InfluxConfig
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
