"""InfluxDB stops for 30 s in the middle of a live run: the job goes on, every interval is backfilled.

The user's processes (`marketspread ingress`, `marketspread job`, two senders at a steady
rate) write metrics to a real InfluxDB server, which is stopped for `OUTAGE_S` seconds
and started again. Afterwards InfluxDB must hold every latency interval the committed
batches recorded, with its exact count (the ground truth is in the committed batches),
those of the outage included. Throughput with and without the outage is a figure, not
an assertion: `bench/influx_outage.py` measures it.
"""
from __future__ import annotations

import time

import pytest

from engine.formats.log import read_consumed
from engine.tools.generate import generate

from .harness import (check_exact, drain, fleet_for, log_tail, sleep_watching, start_ingress, start_job,
                      start_sender, stop_gracefully, wait_until)
from perf.exactness import committed_intervals

from .test_job_crash import _stored_intervals

OUTAGE_S = 30
RATE = 2_000           # messages/s per stream


def _spooled_bytes(state) -> int:
    return sum(p.stat().st_size for p in (state / "metrics-spool").rglob("*") if p.is_file())


@pytest.mark.slow
def test_influxdb_outage_of_30_s_mid_run_is_backfilled_with_no_missing_interval(influxdb, influx_client,
                                                                                 tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=100_000, orders=100_000, wide_share=0.1, seed=29)
    fleet = fleet_for(tmp_path, influx_client.config.as_env())
    log_dir = state / "ingress"
    try:
        ingress, ports = start_ingress(fleet, state)
        job = start_job(fleet, state, "--max-rows-per-batch", 20_000)
        senders = [start_sender(fleet, ports[s], f, "--loop", "--rate", RATE, "--quiet", name=f"send-{s}")
                   for s, f in (("nbbo", nbbo), ("orders", orders))]
        watch = [ingress, job, *senders]
        wait_until(lambda: read_consumed(log_dir) > 0, 180, "the job's first commit", watch)
        sleep_watching(5, watch)
        influxdb.stop()
        down_ns, consumed_down = time.time_ns(), read_consumed(log_dir)
        sleep_watching(OUTAGE_S, watch)
        consumed_up, spooled = read_consumed(log_dir), _spooled_bytes(state)
        influxdb.start()
        up_ns = time.time_ns()
        sleep_watching(10, watch)
        for s in senders:
            fleet.stop(s)
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
        drain(state, job)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
    finally:
        fleet.stop_all()
        influxdb.start()                     # the session's server stays up for later tests

    assert consumed_up > consumed_down, "the job stalled while InfluxDB was down"
    assert spooled > 0, "the outage did not reach the writers' spool"
    ex = check_exact(state)
    assert ex.exact, ex
    run = (state / "run_id").read_text().strip()
    want, got = committed_intervals(state / "results", run), _stored_intervals(influx_client, run)
    in_outage = [k for k in want if down_ns <= k[0] < up_ns]
    print(f"\nFIGURES influx-outage: {OUTAGE_S} s down, {(consumed_up - consumed_down)} events committed "
          f"meanwhile, {spooled} bytes spooled, {len(got)} of {len(want)} intervals stored, "
          f"{len(in_outage)} from the outage")
    assert in_outage, "no interval fell in the outage"
    assert got == want                       # every interval, the outage's included, exactly
    # The ingress's own status points (one a second) of the outage were backfilled too.
    res = influx_client.query('SELECT "accepted" FROM "ingress" WHERE "run" = $run', params={"run": run})
    during = [ts for ts, _ in res[0].values if down_ns <= ts < up_ns]
    assert len(during) >= OUTAGE_S // 2, during
