"""The compare page in a real headless Chromium: a real bench run beside a slower one, flagged."""
from __future__ import annotations

import re
import time
from dataclasses import replace

import numpy as np
from selenium.webdriver.common.keys import Keys

from collector.aggregate import IntervalHistogram
from collector.histogram import LatencyHistogram
from collector.influx.server import free_port
from collector.points import latency_point
from collector.units import NS
from perf.record import ProgressSample, RunRecord, StepLatency, write_record
from perf.sysinfo import ProcessSample
from metrics_ui.app import UiConfig, create_app
from metrics_ui.components import fmt_latency

TIMEOUT = 15


def _slower_copy(base: RunRecord, client, path, name: str = "slow-run", label: str = "slow", latency: float = 2.0,
                 throughput: float = 0.3, seed: int = 7) -> RunRecord:
    """Record a run with `throughput` x the throughput and a median latency `latency` x the real p99, through the
    bench's own recorder (per-second samples scattered as real runs are).

    Its start-to-end histograms go into `latency` like the job's, so the page merges them the same way.
    """
    base_e2e = base.step("start-to-end")
    rng = np.random.default_rng(seed)
    hist = LatencyHistogram()
    points = []
    for t in range(base.window_start_ns // NS * NS, base.window_end_ns, NS):
        h = LatencyHistogram.from_values(rng.lognormal(np.log(latency * base_e2e.p99_ns), 0.3, 2000).astype(np.int64))
        hist.add(h)
        points.append(latency_point(IntervalHistogram(name, "orders", "start-to-end", "host/p0", t, NS, h)))
    client.write(points)
    p = hist.percentiles((50.0, 90.0, 95.0, 99.0, 99.9))
    e2e = StepLatency("start-to-end", hist.total_count, p[50.0], p[90.0], p[95.0], p[99.0], p[99.9], hist.max,
                      hist.mean)
    rec = replace(base, run=name, label=label, started_ns=base.started_ns + NS,
                  throughput_eps=base.throughput_eps * throughput, events=int(base.events * throughput),
                  steps=[s for s in base.steps if s.step != "start-to-end"] + [e2e],
                  progress=[ProgressSample(s.time_ns, int(s.processed * throughput), s.ingested,
                                           s.processed_eps * throughput * rng.normal(1.0, 0.03), s.ingested_eps)
                            for s in base.progress],
                  processes=[ProcessSample(s.name, s.time_ns, s.cpu_percent * 1.5, s.rss_bytes * 2, s.processes)
                             for s in base.processes])
    write_record(rec, path, client)
    return rec


def _trace_count(dash_duo, graph_id: str) -> int:
    return dash_duo.driver.execute_script(
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return gd && gd._fullData ? gd._fullData.filter(t => (t.y || []).length > 0).length : 0;", graph_id)


def _axis_titles(dash_duo, graph_id: str) -> list[str]:
    return dash_duo.driver.execute_script(
        "const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return [gd._fullLayout.xaxis.title.text, gd._fullLayout.yaxis.title.text];", graph_id)


def test_compare_page_shows_runs_side_by_side_and_flags_the_regression(dash_duo, bench_done, bench_db, tmp_path):
    base = bench_done.record
    slow = _slower_copy(base, bench_db, tmp_path / "slow.json")
    assert slow.step("start-to-end").p99_ns > 1.05 * base.step("start-to-end").p99_ns
    app = create_app(UiConfig(influx=bench_db.config, refresh_ms=1000))
    dash_duo.start_server(app, port=free_port())

    # the runs page summarises a bench run over its measurement window, as the compare page does
    dash_duo.wait_for_element("#runs-compare", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#runs-table", base.run, timeout=TIMEOUT)
    row = next(r for r in dash_duo.find_elements("#runs-table tbody tr") if r.text.startswith(base.run + " "))
    assert fmt_latency(base.step("start-to-end").p99_ns) in row.text
    # ... and its runs can be picked there for the compare page
    for name in (base.run, "slow-run"):
        dash_duo.wait_for_element(f"#runs-pick input[value='{name}']", timeout=TIMEOUT).click()
    dash_duo._wait_for(lambda _d: "slow-run" in (dash_duo.find_element("#runs-pick-link").get_attribute("href")
                                                  or ""), timeout=TIMEOUT, msg="compare link with the picks")
    href = dash_duo.find_element("#runs-pick-link").get_attribute("href")
    assert href.endswith(f"/compare?runs={base.run}%2Cslow-run")
    dash_duo.wait_for_page(f"{dash_duo.server_url}/compare?runs={base.run},slow-run", timeout=TIMEOUT)

    dash_duo.wait_for_contains_text("#compare-summary", "REGRESSION", timeout=TIMEOUT)
    # the page comes filled from its layout: no callback draws it a second time once it is mounted
    summary = dash_duo.find_element("#compare-summary-table")
    time.sleep(2)
    assert summary.is_displayed()
    rows = dash_duo.find_elements("#compare-summary-table tbody tr")
    assert [r.find_element("css selector", "td").text for r in rows] == [base.run, "slow-run"]
    assert "baseline" in rows[0].text
    assert "REGRESSION: p99" in rows[1].text
    worse = re.search(r"REGRESSION: throughput ([\d.]+)% worse", rows[1].text)
    assert worse and 65 < float(worse.group(1)) < 75, rows[1].text     # 0.3 x the throughput, 3 % noise per second
    # the verdict table shows each metric's medians, the ratio's interval and the test's p-value
    verdicts = dash_duo.find_element("#compare-verdicts-table").text
    assert "p99 (" in verdicts and "throughput (" in verdicts and "×0.3" in verdicts and "p-value" in verdicts
    assert f"{base.throughput_eps:,.0f}" in rows[0].text and base.machine.cpu_model in rows[0].text

    steps = dash_duo.find_element("#compare-steps-table").text
    assert "start-to-end" in steps and "base" in steps and "slow" in steps and "check_market_data" in steps

    # overlays: one latency curve per run; throughput, CPU and memory per run (and process tree)
    dash_duo._wait_for(lambda _d: _trace_count(dash_duo, "compare-latency") == 2, timeout=TIMEOUT,
                       msg="two latency curves")
    assert _trace_count(dash_duo, "compare-throughput") == 2
    assert _trace_count(dash_duo, "compare-cpu") == 4 and _trace_count(dash_duo, "compare-memory") == 4
    assert _axis_titles(dash_duo, "compare-latency") == ["percentile", "latency (ms)"]
    assert _axis_titles(dash_duo, "compare-memory")[1] == "RSS (MiB)"
    assert "s)" in _axis_titles(dash_duo, "compare-cpu")[0]

    # a looser threshold: the same runs are within it
    box = dash_duo.find_element("#compare-threshold")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("1000", Keys.ENTER)
    dash_duo.wait_for_contains_text("#compare-summary", "within 1000.0%", timeout=TIMEOUT)
    assert "REGRESSION" not in dash_duo.find_element("#compare-summary").text
    assert "threshold=1000" in dash_duo.find_element("#compare-link").get_attribute("href")

    # a bad threshold and an unknown run give clear banners, not errors
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("-3", Keys.ENTER)
    dash_duo.wait_for_contains_text("#compare-banner", "threshold", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#compare-summary", "REGRESSION", timeout=TIMEOUT)   # drawn with the default
    dash_duo.wait_for_page(f"{dash_duo.server_url}/compare?runs={base.run},no-such-run", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#compare-banner", "no recorded run named no-such-run", timeout=TIMEOUT)
    assert dash_duo.get_logs() == []


def test_compare_page_says_no_significant_difference_for_runs_of_the_same_code(dash_duo, bench_done, bench_db,
                                                                                  tmp_path):
    """Two runs drawn from one distribution: no verdict, however their single p99s differ; a bad URL is shown."""
    base = bench_done.record
    a = _slower_copy(base, bench_db, tmp_path / "a.json", "same-a", "same", latency=1.0, throughput=1.0, seed=1)
    b = _slower_copy(base, bench_db, tmp_path / "b.json", "same-b", "same", latency=1.0, throughput=1.0, seed=2)
    assert a.step("start-to-end").p99_ns != b.step("start-to-end").p99_ns
    app = create_app(UiConfig(influx=bench_db.config, refresh_ms=1000))
    dash_duo.start_server(app, port=free_port())
    dash_duo.wait_for_page(f"{dash_duo.server_url}/compare?runs=same-a,same-b&threshold=abc", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#compare-summary", "no significant difference", timeout=TIMEOUT)
    assert "REGRESSION" not in dash_duo.find_element("#compare-summary").text
    dash_duo.wait_for_contains_text("#compare-banner", "threshold", timeout=TIMEOUT)      # 'abc' said, not hung
    # the page comes filled from its layout: no callback draws it a second time once it is mounted
    summary = dash_duo.find_element("#compare-summary-table")
    time.sleep(2)
    assert summary.is_displayed() and "threshold" in dash_duo.find_element("#compare-banner").text
    # grouped by label, the two copies form one group: nothing left to compare against
    dash_duo.wait_for_page(f"{dash_duo.server_url}/compare?runs={base.run},same-a,same-b&group=1",
                           timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#compare-verdicts-table", "same-a, same-b vs", timeout=TIMEOUT)
    assert dash_duo.get_logs() == []
