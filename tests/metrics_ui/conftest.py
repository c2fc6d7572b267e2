"""Fixtures of the dashboard tests: synthetic latency runs in a fresh InfluxDB, the app, headless Chromium."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest

from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.points import latency_point
from collector.units import NS

STEPS = ("ingress", "source", "check_market_data", "sink", "start-to-end")
PIPELINES = ("nbbo", "orders")
# (median ns, sigma) of a lognormal per step: ingress ~50 µs ... start-to-end ~400 ms
_SHAPE = {"ingress": (5e4, 0.6), "source": (2e8, 0.5), "check_market_data": (3e5, 0.8),
          "sink": (1e5, 0.7), "start-to-end": (4e8, 0.4)}


def pytest_setup_options():
    """Chrome options for dash_duo: headless (Chromium as root also needs no sandbox; dash adds it)."""
    from selenium.webdriver.chrome.options import Options
    options = Options()
    options.add_argument("--headless=new")
    options.add_argument("--window-size=1400,1000")
    return options


def _worker(step: str, partition: int) -> str:
    return "host-a/ingress" if step == "ingress" else f"host-a/p{partition}"


def make_points(run: str, start_ns: int, seconds: int, events_per_s: int = 2000, seed: int = 1,
                partitions: int = 2) -> tuple[list, dict[str, int]]:
    """Return realistic `latency` points of a run and the events written per step."""
    rng = np.random.default_rng(seed)
    points, totals = [], {s: 0 for s in STEPS}
    for i in range(seconds):
        t = start_ns + i * NS
        for step in STEPS:
            median, sigma = _SHAPE[step]
            for pipeline in PIPELINES:
                for part in ((0,) if step == "ingress" else range(partitions)):
                    n = int(events_per_s // (2 * (1 if step == "ingress" else partitions)) * rng.uniform(0.8, 1.2))
                    values = rng.lognormal(np.log(median), sigma, n).astype(np.int64) + 1
                    hist = LatencyHistogram.from_values(values)
                    points.append(latency_point(IntervalHistogram(run, pipeline, step, _worker(step, part),
                                                                  t, NS, hist)))
                    totals[step] += n
    return points, totals


@dataclass(frozen=True)
class UiData:
    """What the fixture wrote: run names, their first interval and the events per step."""
    live_run: str
    live_start_ns: int
    live_totals: dict
    done_run: str
    done_start_ns: int
    done_totals: dict


@pytest.fixture
def ui_data(influx_client) -> UiData:
    """Write a live run (last point now) and a run that finished an hour ago."""
    now = time.time_ns() // NS * NS
    live_start = now - 29 * NS
    live, live_totals = make_points("live-1", live_start, 30, seed=1)
    done_start = now - 3600 * NS
    done, done_totals = make_points("done-1", done_start, 20, seed=2)
    influx_client.write(live + done)
    return UiData("live-1", live_start, live_totals, "done-1", done_start, done_totals)


@pytest.fixture
def ui_app(influx_client):
    """The dashboard app reading the test's database."""
    from metrics_ui.app import UiConfig, create_app
    return create_app(UiConfig(influx=influx_client.config, refresh_ms=1000))
