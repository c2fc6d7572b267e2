"""The live job is SIGKILLed at random moments while senders feed it; nothing is lost or doubled.

The processes are the user's: `marketspread ingress`, `marketspread job` (metrics on, to a
real InfluxDB) and two `marketspread send --loop` at a steady rate. Each kill takes the
job's whole session (driver, JVM, Python workers) at once; the restarted job picks up from
its checkpoint while the senders keep going.
"""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from engine.formats.log import read_consumed, read_head
from perf.exactness import committed_intervals
from engine.tools.generate import generate

from .harness import (check_exact, drain, fleet_for, kill_session, log_tail, start_ingress, start_job,
                      start_sender, stop_gracefully, wait_until)

KILLS = 3
RATE = 1_000           # messages/s per stream: the job keeps up even on a busy 2-core machine


def _stored_intervals(client, run: str) -> Counter:
    res = client.query('SELECT "count" FROM latency WHERE "run" = $run AND "step" != \'ingress\' '
                       'GROUP BY "step", "pipeline", "worker"', params={"run": run})
    return Counter({(ts, s.tags["step"], s.tags["pipeline"], s.tags["worker"]): c
                    for s in res for ts, c in s.values})


@pytest.mark.slow
def test_job_sigkilled_three_times_during_a_live_run_stays_exact(influx_client, tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=100_000, orders=100_000, wide_share=0.1, seed=17)
    fleet = fleet_for(tmp_path, influx_client.config.as_env())
    log_dir = state / "ingress"
    rng = np.random.default_rng(int(time.time()))
    restarts_ns: list[int] = []
    try:
        ingress, ports = start_ingress(fleet, state)
        job = start_job(fleet, state, "--max-rows-per-batch", 20_000, name="job-0")
        senders = [start_sender(fleet, ports[s], f, "--loop", "--rate", RATE, "--quiet", name=f"send-{s}")
                   for s, f in (("nbbo", nbbo), ("orders", orders))]
        watch = [ingress, *senders]
        for k in range(1, KILLS + 1):
            before = read_consumed(log_dir)
            wait_until(lambda: read_consumed(log_dir) > before, 120,
                       f"a commit by job-{k - 1}", [job, *watch])
            time.sleep(float(rng.uniform(0.0, 3.0)))              # a random moment mid-run
            kill_session(job)
            restarts_ns.append(time.time_ns())
            job = start_job(fleet, state, "--max-rows-per-batch", 20_000, name=f"job-{k}")
        before = read_consumed(log_dir)
        wait_until(lambda: read_consumed(log_dir) > before, 180, "a commit by the last job", [job, *watch])
        # the volume asserted below, however fast the restarts went
        wait_until(lambda: read_head(log_dir) > 100_000, 120, "100,000 events logged", [job, *watch])
        for s in senders:
            fleet.stop(s)
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
        head = drain(state, job)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
    finally:
        fleet.stop_all()

    ex = check_exact(state)
    print(f"\nFIGURES job-crash: kills={KILLS} logged={ex.logged} results={ex.committed} "
          f"expected={ex.expected} duplicates={ex.duplicate_seqs}")
    assert ex.logged == head > 100_000
    assert ex.duplicate_seqs == 0, "a result was committed twice"
    assert ex.committed == ex.expected > 1000
    assert ex.exact

    # Metrics carry on under the same run: one run id across the restarts ...
    run = (state / "run_id").read_text().strip()
    runs = influx_client.query('SHOW TAG VALUES FROM latency WITH KEY = "run"')
    assert [v[1] for v in runs[0].values] == [run]
    want, got = committed_intervals(state / "results", run), _stored_intervals(influx_client, run)
    # ... with points from every job incarnation after a restart,
    for t in restarts_ns:
        assert any(ts >= t for ts, *_ in got), "no metrics after a restart"
    e2e = [k for k in want if k[1] == "start-to-end"]
    stored, total = sum(got[k] for k in e2e), sum(want[k] for k in e2e)
    print(f"FIGURES job-crash metrics: start-to-end events stored {stored} of {total} committed "
          f"({stored / total:.4%}); intervals stored {len(got)} of {len(want)}")
    assert total == ex.logged
    # ... and every interval in InfluxDB exactly as the committed batches hold it: none lost
    # at a kill, none counted twice or rewritten with part of its samples after a restart.
    wrong = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert not wrong, f"{len(wrong)} intervals differ (stored, committed): {sorted(wrong.items())[:5]}"
