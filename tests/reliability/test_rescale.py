"""The live job is restarted with 1, then 4, 2 and 1 shards while senders feed it, and SIGKILLed
mid-run and mid-rescale; the results stay exact.

The processes are the user's: `marketspread ingress` (its own shard count, 1: the tasks of
other counts read the log ranges), `marketspread job` (metrics on, to a real InfluxDB) and two
`marketspread send --loop`. Each job before a new count is SIGKILLed mid-batch, with results of
a planned batch written but not committed (the rescale drops them); one job is killed inside its
rescale, between the two renames that swap the new tables in (`--pause-rescale-at swapped`),
and the next job, asked for yet another count, finishes that rescale first.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from collector.vocabulary import FIELD_FROM_SHARDS, FIELD_TO_SHARDS, JOB_RESCALE
from engine.formats.batch import batch_dir
from engine.formats.log import read_consumed, read_head
from engine.spark.checkpoint import committed_batches, recorded_shards
from engine.tools.generate import generate

from .harness import (check_alive, check_exact, drain, fleet_for, kill_session, log_tail, session_members,
                      start_ingress, start_job, start_sender, stop_gracefully, wait_for_file_text, wait_until)

RATE = 1_000           # messages/s per stream: the job keeps up even on a busy 2-core machine
ROWS = ("--max-rows-per-batch", 5_000)


def _stale_results(state, first_shard: int) -> bool:
    """Whether a planned, uncommitted batch holds results of a shard from `first_shard` on."""
    cp = state / "checkpoint"
    planned = max((int(n.name) for n in (cp / "offsets").iterdir() if n.name.isdigit()), default=-1)
    if planned <= max(committed_batches(cp), default=-1):
        return False
    try:
        names = os.listdir(batch_dir(state / "results", planned))
    except FileNotFoundError:
        return False
    return any(n.endswith(".bin") and int(n.split(".")[0]) >= first_shard for n in names)


def _kill_mid_batch(job, state, first_shard: int, watch) -> None:
    """SIGKILL the job while a planned batch has results of shards from `first_shard` on, not committed.

    Such results would be read twice after a rescale to fewer shards, had the rescale not
    removed them. The session is stopped (SIGSTOP) to look again before the kill: the batch
    may have committed between the look and the stop.
    """
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        check_alive([job, *watch])
        if _stale_results(state, first_shard):
            members = session_members(job.popen.pid)
            _signal(members, signal.SIGSTOP)
            if _stale_results(state, first_shard):
                kill_session(job)
                return
            _signal(members, signal.SIGCONT)
        time.sleep(0.002)
    raise AssertionError(f"no batch of {job.name} was caught with results of shard {first_shard} or later, "
                         f"uncommitted\n{log_tail(job.log_path)}")


def _signal(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@pytest.mark.slow
def test_restarts_with_1_4_2_1_shards_under_load_with_a_kill_mid_rescale_stay_exact(influx_client, tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=50_000, orders=50_000, wide_share=0.1, seed=23)
    fleet = fleet_for(tmp_path, influx_client.config.as_env())
    log_dir, cp = state / "ingress", state / "checkpoint"

    def commit_by(job, name):
        before = read_consumed(log_dir)
        wait_until(lambda: read_consumed(log_dir) > before, 120, f"a commit by {name}", [job, *watch])

    try:
        ingress, ports = start_ingress(fleet, state)
        job = start_job(fleet, state, "--shards", 1, *ROWS, name="job-1")
        senders = [start_sender(fleet, ports[s], f, "--loop", "--rate", RATE, "--quiet", name=f"send-{s}")
                   for s, f in (("nbbo", nbbo), ("orders", orders))]
        watch = [ingress, *senders]
        commit_by(job, "job-1")
        _kill_mid_batch(job, state, 0, watch)                                   # its results overwritten by shard 0's

        job = start_job(fleet, state, "--shards", 4, *ROWS, name="job-4")       # 1 -> 4
        assert recorded_shards(cp) == 4
        commit_by(job, "job-4")
        _kill_mid_batch(job, state, 2, watch)                                   # shards 2, 3: none after 4 -> 2

        # 4 -> 2, killed between the renames of the swap: no shard-state folder at that moment
        job = fleet.spawn("job-2-killed", ["job", "--state-dir", state, "--master", "local[2]", "--keep-log",
                                           "--shards", 2, *ROWS, "--pause-rescale-at", "swapped"])
        wait_for_file_text(job.log_path, "rescale paused at swapped", 120, [job, *watch])
        assert (cp / "rescale.json").exists() and not (cp / "shard-state").exists()
        kill_session(job)

        # asked for 1: finishes 4 -> 2 first, then 2 -> 1
        job = start_job(fleet, state, "--shards", 1, *ROWS, name="job-1-again")
        text = job.log_path.read_text()
        assert "finishing the rescale from 4 to 2 shards" in text and "from 2 to 1 shards" in text, text[-3000:]
        assert recorded_shards(cp) == 1 and not (cp / "rescale.json").exists()
        commit_by(job, "job-1-again")
        wait_until(lambda: read_head(log_dir) > 30_000, 120, "30,000 events logged", [job, *watch])
        for s in senders:
            fleet.stop(s)
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
        head = drain(state, job)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
    finally:
        fleet.stop_all()

    ex = check_exact(state)
    print(f"\nFIGURES rescale: logged={ex.logged} results={ex.committed} expected={ex.expected} "
          f"duplicates={ex.duplicate_seqs}")
    assert ex.logged == head > 30_000
    assert ex.duplicate_seqs == 0, "a result was committed twice"
    assert ex.committed == ex.expected > 300
    assert ex.exact

    # One point per rescale, for the dashboard's marker (the killed one's is written by the job that finished it).
    res = influx_client.query(f'SELECT "{FIELD_FROM_SHARDS}", "{FIELD_TO_SHARDS}" FROM "{JOB_RESCALE}"')
    points = [(f, t) for s in res for _, f, t in s.values]
    assert points == [(1, 4), (4, 2), (2, 1)], points
