"""The dashboard in headless Chromium on what a real short run wrote: Spark job, real InfluxDB.

One replay per module (generated input, several micro-batches, metrics shipped to the test
server); the pages must load without browser console errors and their charts carry data.
"""
from __future__ import annotations

import csv
import io
import time

import pytest
import requests

from collector.bins import WALLAROO_UI_LABELS
from collector.influx import InfluxClient
from engine.config import Config
from engine.wire.fixish import frame
from marketspread.replay import replay
from engine.tools.generate import generate
from metrics_ui.app import UiConfig, create_app
from collector.query.store import MetricsStore

from ..conftest import fresh_database
from collector.influx.server import free_port as _free_port
from .test_pages import TIMEOUT, _fits_window, _labels_inside, _legend_clear, _wait_traces

RUN = "replay-real-1"
DB = "t_ui_real_run"
STEPS = ("ingress", "source", "check_market_data", "sink", "start-to-end")
BP_STEPS = ("ingress", "source", "check_market_data", "sink", "job")
STATUSES = ("OK", "LOW", "HIGH")


@pytest.fixture(scope="module")
def real_client(influxdb):
    """A client of this module's own database, dropped afterwards."""
    yield from fresh_database(influxdb.url, DB)


@pytest.fixture(scope="module")
def real_run(spark, real_client, tmp_path_factory):
    """Replay ~80k generated events in batches of 10k with metrics on; return the report once the run is finished."""
    d = tmp_path_factory.mktemp("real-run")
    nbbo, orders = d / "nbbo.msg", d / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=40_000, orders=40_000, wide_share=0.1, seed=7)
    # two senders of bad input, one reason each: the ingress sets them aside and counts them per reason
    unknown, oversized = d / "unknown.msg", d / "oversized.msg"
    unknown.write_bytes(frame(b"\x63" + b"x" * 41) * 3)
    oversized.write_bytes(b"\xff" * 40)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in real_client.config.as_env().items():     # URL, database and credentials
            mp.setenv(k, v)
        cfg = Config.from_env(state_dir=d / "state", max_rows_per_batch=10_000)
        rep = replay([nbbo, unknown, oversized], [orders], d / "out.msg", cfg, run_id=RUN, spark=spark)
    assert rep.accepted == 80_350 and rep.bad == 2 and rep.metrics.points_dropped == 0
    # The pages call a run live until its last point is 10 s old: wait, so they show it finished.
    store, deadline = MetricsStore(real_client), time.monotonic() + 30
    while (info := store.run(RUN, time.time_ns())) is None or info.live:
        assert time.monotonic() < deadline, f"run {RUN} still live or missing: {info}"
        time.sleep(0.5)
    return rep


@pytest.fixture
def real_app(real_client, tmp_path):
    """The dashboard app reading the real run's database (no alert rules)."""
    return create_app(UiConfig(influx=real_client.config, refresh_ms=1000, alerts_file=tmp_path / "rules.json"))


def _rows(dash_duo, table: str) -> list[list[str]]:
    """Return a table's body cells as the browser shows them."""
    return [[td.text for td in tr.find_elements("css selector", "td")]
            for tr in dash_duo.find_elements(f"{table} tbody tr")]


def _total(traces: list[dict]) -> float:
    return sum(y for t in traces for y in t["y"] if y is not None)


def _last_backlogs(client: InfluxClient) -> dict[str, str]:
    """Return each step's last written backlog, as the panel's table shows it (steps without one are left out)."""
    series = client.query('SELECT "backlog" FROM "backpressure" WHERE "run" = $run GROUP BY "step" '
                          'ORDER BY time DESC LIMIT 1', {"run": RUN})
    return {s.tags["step"]: "—" if s.values[0][1] is None else f"{int(s.values[0][1]):,}" for s in series}


def _spark_batches(client: InfluxClient) -> int:
    series = client.query('SELECT count("batch_ms") FROM "spark_progress" WHERE "run" = $run', {"run": RUN})
    return int(series[0].values[0][1])


def _run_id(client: InfluxClient) -> str:
    """Return the replay's one Spark run id, as its `runs` row has it."""
    [series] = client.query('SELECT "status" FROM "runs" WHERE "run" = $run GROUP BY "run_id"', {"run": RUN})
    return series.tags["run_id"]


def _open_runs(dash_duo, rep) -> list[str]:
    dash_duo.wait_for_contains_text("#runs-table", RUN, timeout=TIMEOUT)
    row = next(r for r in _rows(dash_duo, "#runs-table") if r[0] == RUN)
    assert row[1] == "stopped" and row[4] == f"{rep.accepted:,}"       # the replay stops its query at the end
    return row


def _open_job(dash_duo, rep) -> None:
    dash_duo.wait_for_contains_text(
        "#job-summary", f"{rep.accepted:,} events start-to-end in the range · {rep.accepted:,} in the whole run "
                        "· stopped at ", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-backpressure-table", "sink", timeout=TIMEOUT)


def _open_step(dash_duo, rep) -> None:
    dash_duo.wait_for_contains_text("#step-summary", f"{rep.accepted:,} events in the range", timeout=TIMEOUT)
    _wait_traces(dash_duo, "step-bins")
    _wait_traces(dash_duo, "step-curve")


def test_pages_show_a_real_run(dash_duo, real_app, real_run, real_client):
    rep = real_run
    dash_duo.start_server(real_app, port=_free_port())

    # runs page: the finished run with all its events, its last minute's throughput and p99
    row = _open_runs(dash_duo, rep)
    assert row[5].endswith(" events/s") and float(row[5].removesuffix(" events/s").replace(",", "")) > 0, row
    assert row[6].endswith(("µs", "ms", "s")) and row[6][0].isdigit(), row      # p99 start-to-end
    _fits_window(dash_duo, "#runs-table")                            # every column, alerts firing too, at 1280 px
    assert dash_duo.get_logs() == []

    # job page: every step, both charts, and the backpressure each real writer sent
    run_id = _run_id(real_client)
    dash_duo.find_element(f"#runs-table a[href='/run/{RUN}?run={run_id}']").click()         # Spark's run id
    _open_job(dash_duo, rep)
    assert dash_duo.find_element("#job-run-id-shown").text == run_id
    # first, as for any query: its batches against the trigger and the rows each took in
    assert _wait_traces(dash_duo, "job-query-batches-duration")
    assert _total(_wait_traces(dash_duo, "job-query-batches-input")[:1]) > 0
    steps = {r[0]: r for r in _rows(dash_duo, "#job-steps-table")}
    assert list(steps) == list(STEPS)
    want = {"ingress": rep.accepted, "source": rep.accepted, "check_market_data": rep.accepted,
            "sink": rep.results, "start-to-end": rep.accepted}
    assert {s: int(r[1].replace(",", "")) for s, r in steps.items()} == want
    assert all(cell != "—" for r in steps.values() for cell in r[2:5]), steps       # p50, p95, p99
    assert [r[0] for r in _rows(dash_duo, "#job-pipelines-table")] == ["nbbo", "orders"]
    assert _total(_wait_traces(dash_duo, "job-throughput")) > 0
    assert len(_wait_traces(dash_duo, "job-percentiles")) == 3
    bp = _rows(dash_duo, "#job-backpressure-table")
    assert [r[0] for r in bp] == list(BP_STEPS), bp
    badges = [b.text for b in dash_duo.find_elements("#job-backpressure-table .bp-badge")]
    assert len(badges) == len(BP_STEPS) and all(b in STATUSES for b in badges[:4]), badges
    assert all(r[2] != "—" for r in bp[1:]), bp                      # busy % of the job's steps and the query
    assert bp[0][3] != "—" and bp[0][5] != "—", bp                   # the ingress' muted share and backlog
    assert _wait_traces(dash_duo, "job-bp-busy") and _wait_traces(dash_duo, "job-bp-backlog")
    # the run is finished: the panel reaches its true end, the backlogs written after the last latency point
    last = _last_backlogs(real_client)                               # steps that write no backlog show "—"
    assert {r[0]: r[5] for r in bp} == {step: last.get(step, "—") for step in BP_STEPS}, bp
    for graph in ("job-throughput", "job-percentiles", "job-bp-busy", "job-bp-backlog"):
        _legend_clear(dash_duo, graph)
    # the job graph: each step with the status of the table, and what "busy" means for micro-batches
    nodes = dash_duo.find_elements("#job-graph .graph-node")
    assert [n.get_attribute("data-step") for n in nodes] == list(BP_STEPS[:4])
    assert [n.find_element("css selector", ".bp-badge").text for n in nodes] == badges[:4]
    assert "micro-batch" in dash_duo.find_element("#job-graph .graph-job").text
    assert "Busy, for the job, is the share of time a micro-batch was running" in \
        dash_duo.find_element("#job-backpressure-note").text
    # Spark's batches: every batch the listener wrote, its phases stacked under the slowest batch
    batches = _spark_batches(real_client)
    dash_duo.wait_for_contains_text("#job-batch-summary", f"{batches:,} micro-batches in the range", timeout=TIMEOUT)
    assert not dash_duo.find_elements("#job-batches")          # folded: the phases are drawn when asked for
    dash_duo.find_element("#job-spark-toggle").click()
    traces = _wait_traces(dash_duo, "job-batches")
    names = dash_duo.driver.execute_script(
        "return document.querySelector('#job-batches .js-plotly-plot')._fullData.map(t => t.name);")
    assert "addBatch" in names and names[-1] == "slowest batch", names
    assert max(traces[-1]["y"]) >= max(max(t["y"]) for t in traces[:-1]), traces
    # the ingress: the two bad senders by reason, and the muted time (none: no backlog limit in a replay)
    dash_duo.wait_for_contains_text("#job-ingress-summary", "2 bad frames set aside", timeout=TIMEOUT)
    summary = dash_duo.find_element("#job-ingress-summary").text
    assert "unknown type 1" in summary and "oversized frame 1" in summary and "muted 0.0 s" in summary, summary
    dash_duo.find_element("#job-ingress-toggle").click()
    bad = _wait_traces(dash_duo, "job-bad-frames")
    assert _total(bad) == 2 and len(bad) == 2, bad
    _wait_traces(dash_duo, "job-muted")
    assert dash_duo.get_logs() == []

    # step page of start-to-end: Wallaroo bins, the percentile curve, an export of the same events
    dash_duo.find_element(f"#job-steps-table a[href='/step/{RUN}/start-to-end?run={run_id}']").click()
    _open_step(dash_duo, rep)
    bins = _wait_traces(dash_duo, "step-bins")[0]
    # Wallaroo's ranges below 1 s as they were, then longer ones only as far as the run's slowest events reach
    assert bins["x"][:11] == list(WALLAROO_UI_LABELS[:11]) and abs(sum(bins["y"]) - 100.0) < 1e-6, bins["x"]
    assert len(bins["x"]) == 12 or bins["y"][-2] > 0, bins
    curve = _wait_traces(dash_duo, "step-curve")
    assert len(curve[0]["y"]) > 10 and curve[0]["y"] == sorted(curve[0]["y"])
    assert len(curve[1]["y"]) == 5
    _labels_inside(dash_duo, "step-curve", 1)                       # "p99.9", "p99.99" on the flat tail too
    assert _total(_wait_traces(dash_duo, "step-throughput")) > 0
    for graph in ("step-curve", "step-throughput"):
        _legend_clear(dash_duo, graph)
    href = dash_duo.find_element("#step-csv").get_attribute("href")
    assert f"/export/{RUN}/start-to-end.csv?run={run_id}&from=" in href
    got = requests.get(href, timeout=TIMEOUT)
    assert got.status_code == 200
    assert sum(int(r["count"]) for r in csv.DictReader(io.StringIO(got.text))) == rep.accepted
    assert dash_duo.get_logs() == []
