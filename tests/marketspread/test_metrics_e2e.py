"""Metrics end to end: real Spark job, real InfluxDB server, counts exact, outage survived."""
from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
from hdrh.histogram import HdrHistogram

from collector.influx import InfluxClient
from collector.vocabulary import MARKET_SPREAD_STEPS
from engine.config import Config
from engine.formats.log import read_consumed
from marketspread.replay import replay
from perf.exactness import committed_intervals
from engine.tools.generate import generate

pytestmark = pytest.mark.slow      # whole Spark runs into InfluxDB, ~90 s


@pytest.fixture
def metrics_env(influx_client, monkeypatch):
    for k, v in influx_client.config.as_env().items():       # URL, database and credentials
        monkeypatch.setenv(k, v)
    return influx_client


def _sums(client: InfluxClient, run: str) -> dict[str, int]:
    res = client.query('SELECT sum("count") FROM latency WHERE "run" = $run GROUP BY "step"',
                       params={"run": run})
    return {s.tags["step"]: int(s.values[0][1]) for s in res}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics-input")
    nbbo, orders = d / "nbbo.msg", d / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=60_000, orders=60_000, wide_share=0.1, seed=21)
    return nbbo, orders


def test_step_counts_equal_events_across_batches_and_partitions(spark, metrics_env, inputs, tmp_path):
    nbbo, orders = inputs
    cfg = Config.from_env(state_dir=tmp_path / "state", max_rows_per_batch=10_000, shards=2)
    rep = replay([nbbo], [orders], tmp_path / "out.msg", cfg, run_id="counts", spark=spark)
    sums = _sums(metrics_env, "counts")
    assert rep.accepted == 120_350
    for step in ("ingress", "source", "check_market_data", "start-to-end"):
        assert sums[step] == rep.accepted, step          # every event once, none twice
    assert sums["sink"] == rep.results
    workers = metrics_env.query('SHOW TAG VALUES FROM latency WITH KEY = "worker" WHERE "run" = $run',
                                params={"run": "counts"})
    assert len(workers[0].values) >= 3                 # the state stage's partitions, ingress
    # Backpressure at a glance: each step's busy share and status, the ingress' muted share.
    bp = metrics_env.query('SELECT last("status"), last("busy_share"), last("backpressured_share") '
                           'FROM backpressure WHERE "run" = $run GROUP BY "step"', params={"run": "counts"})
    last = {s.tags["step"]: s.values[0][1:] for s in bp}
    assert {"ingress", "source", "check_market_data", "sink"} <= set(last)
    for step in ("source", "check_market_data", "sink"):
        status, busy, pressured = last[step]
        assert status == "OK" and 0 < busy <= 1 and pressured == 0, step
    assert last["ingress"][0] in ("OK", "LOW", "HIGH") and 0 <= last["ingress"][2] <= 1
    # the job, attached through monitor() with its adapter: the ingress' muted share is its held-back share
    status, busy, held_back = last["job"]
    assert status in ("OK", "LOW", "HIGH") and 0 < busy <= 1 and (held_back is None or 0 <= held_back <= 1)
    runs = metrics_env.query('SELECT "steps", "app_id" FROM runs WHERE "run" = $run', params={"run": "counts"})
    (row,) = runs[0].values
    assert json.loads(row[1]) == list(MARKET_SPREAD_STEPS) and row[2] == spark.sparkContext.applicationId


def test_stored_hdr_decodes_with_the_hdrhistogram_package(spark, metrics_env, inputs, tmp_path):
    nbbo, orders = inputs
    cfg = Config.from_env(state_dir=tmp_path / "state", max_rows_per_batch=30_000)
    rep = replay([nbbo], [orders], tmp_path / "out.msg", cfg, run_id="hdr", spark=spark)
    res = metrics_env.query('SELECT "count", "hdr", "p99" FROM latency WHERE "run" = $run '
                            "AND \"step\" = 'start-to-end'", params={"run": "hdr"})
    total = 0
    merged = HdrHistogram(1, 3_600_000_000_000, 3)
    for _, count, hdr, p99 in res[0].values:
        h = HdrHistogram.decode(hdr)
        assert h.get_total_count() == count
        assert h.get_value_at_percentile(99) == p99
        merged.add(h)
        total += count
    assert total == rep.accepted
    assert 0 < merged.get_value_at_percentile(50) <= merged.get_value_at_percentile(99) < 600e9


def test_influxdb_outage_mid_run_loses_no_interval(spark, influxdb, metrics_env, inputs, tmp_path, monkeypatch):
    """InfluxDB is down while the job runs; after it returns every interval is backfilled."""
    nbbo, orders = inputs
    # Its writers must try to send during the outage, not only after: they send every
    # 0.2 s, InfluxDB comes back only once a writer has spooled points it could not send
    # and a third of the records are committed, and the run's small batches leave most
    # of it for after that.
    monkeypatch.setenv("MS_INFLUX_FLUSH_S", "0.2")
    state = tmp_path / "state"
    cfg = Config.from_env(state_dir=state, max_rows_per_batch=2_000)
    influxdb.stop()
    log_dir = state / "replays" / "outage" / "ingress"
    spools = state / "metrics-spool"

    def restart_after_progress():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (read_consumed(log_dir) < 40_000
                                               or not any(spools.glob("*/*.lp"))):
            time.sleep(0.05)
        influxdb.start()
    t = threading.Thread(target=restart_after_progress)
    t.start()
    try:
        rep = replay([nbbo], [orders], tmp_path / "out.msg", cfg, run_id="outage", spark=spark, keep=True)
    finally:
        t.join()
    assert rep.metrics.points_spooled > 0, "the outage did not hit the writer"
    assert rep.metrics.points_dropped == 0
    # Ground truth: the intervals the committed batches hold, with their counts.
    want = committed_intervals(state / "replays" / "outage" / "results", "outage")
    res = metrics_env.query('SELECT "count" FROM latency WHERE "run" = $run AND "step" != \'ingress\' '
                            'GROUP BY "step", "pipeline", "worker"', params={"run": "outage"})
    got = Counter({(ts, s.tags["step"], s.tags["pipeline"], s.tags["worker"]): c
                   for s in res for ts, c in s.values})
    assert got == want
    assert _sums(metrics_env, "outage")["start-to-end"] == rep.accepted
