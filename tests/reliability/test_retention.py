"""Retention on: the state folder stays bounded at a high rate, results stay exact.

The job runs with its default log retention and a small results retention (by size and
age) for 5 minutes at 100,000 events/s offered, forwarding its results to a real
receiver. The reference follows the live log from outside the job, holding only the
segments it has not read yet (`ingress_log.write_hold`), so it sees every record in
arrival order although the log on disk never holds more than a few segments.
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from perf.sysinfo import allocated_bytes
from engine.formats.log import DEFAULT_SEGMENT_RECORDS, RECORD_BYTES, LogReader, read_consumed, read_head, segment_firsts, write_hold
from engine.formats.result_frames import RESULT_FRAME
from engine.formats.batch import read_retained, retained_from

from collector.influx.server import free_port
from perf.e2e import ensure_input
from perf.exactness import RESULT_FIELDS, ReferenceRule

from ..cli_inprocess import run_main
from .harness import (drain, fleet_for, kill_session, log_tail, sleep_watching,
                      start_ingress, start_sender, stop_gracefully, wait_until)

RATE = 50_000                       # messages/s per stream: 100,000 events/s offered
STREAM_S = float(os.environ.get("MS_TEST_RETENTION_S", 300))
WARMUP_S = 60.0
SAMPLE_S = 5.0
MAX_BACKLOG = 1_000_000
RESULTS_BYTES = 16 << 20
RESULTS_AGE = "60s"
SEGMENT_BYTES = DEFAULT_SEGMENT_RECORDS * RECORD_BYTES
# What retention allows on disk: the log behind the job (backlog) plus the segment being
# written and one partly committed; the results bound; the checkpoint (100 batches) and
# Spark's scratch folder, stats and small files.
LOG_BOUND = MAX_BACKLOG * RECORD_BYTES + 3 * SEGMENT_BYTES
OTHER_BOUND = 64 << 20
STATE_BOUND = LOG_BOUND + RESULTS_BYTES + OTHER_BOUND



class LogFollower:
    """Reads the live log in arrival order into the plain-Python reference, holding what it has not read."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.pos = 0
        self.ref = ReferenceRule()
        self.error: BaseException | None = None
        self.max_lag = 0
        write_hold(log_dir, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        reader = LogReader(self.log_dir)
        try:
            while True:
                head = read_head(self.log_dir)
                self.max_lag = max(self.max_lag, head - self.pos)
                if head == self.pos:
                    if self._stop.is_set():
                        return
                    time.sleep(0.05)
                    continue
                end = min(head, self.pos + (1 << 18))
                self.ref.feed(self.pos, reader.read(self.pos, end))
                self.pos = end
                write_hold(self.log_dir, self.pos)
        except BaseException as e:            # surfaced by finish()
            self.error = e

    def finish(self, head: int, timeout: float = 300.0) -> dict[str, np.ndarray]:
        """Read up to `head`, stop, and return the expected results."""
        wait_until(lambda: self.pos >= head or self.error is not None, timeout, "the reference to read the log", [])
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise self.error
        return self.ref.expected()


def _fields_equal(frames: np.ndarray, expected: dict[str, np.ndarray], rows: slice | np.ndarray) -> bool:
    if len(frames) != len(expected["seq"][rows]):
        return False
    return all(np.array_equal(frames[f], expected[f][rows]) for f in RESULT_FIELDS)


@pytest.mark.slow
def test_state_folder_stays_bounded_at_high_rate_with_exact_results(tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    nbbo, orders = ensure_input(data, 350)
    received = tmp_path / "received.bin"
    fleet = fleet_for(tmp_path)
    log_dir, out_dir = state / "ingress", state / "results"
    samples: list[tuple[float, dict[str, int]]] = []
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics", "--max-backlog", MAX_BACKLOG)
        follower = LogFollower(log_dir)
        rport = free_port()
        receiver = fleet.spawn("receive", ["receive", "--port", rport, "--out", received])
        wait_until(lambda: "listening" in receiver.log_path.read_text(errors="replace"), 60,
                   "the receiver to listen", [receiver])
        job = fleet.spawn("job", ["job", "--state-dir", state, "--master", "local[2]", "--no-metrics",
                                  "--results-retention", RESULTS_AGE, "--results-retention-bytes",
                                  RESULTS_BYTES, "--forward", f"127.0.0.1:{rport}"])
        wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"), 240,
                   "the job to start its query", [job], interval=0.3)
        senders = [start_sender(fleet, ports[s], f, "--rate", RATE, "--loop", name=f"send-{s}")
                   for s, f in (("nbbo", nbbo), ("orders", orders))]
        watch = [ingress, job, receiver, *senders]
        t0 = time.monotonic()
        while time.monotonic() - t0 < STREAM_S:
            sleep_watching(SAMPLE_S, watch)
            # Log the test's own reader holds beyond what the job needs: not retention's to delete.
            held = max(0, read_consumed(log_dir) - follower.pos) * RECORD_BYTES
            parts = {k: allocated_bytes(state / k) for k in ("ingress", "results", "checkpoint")}
            parts["total"] = allocated_bytes(state)
            parts["held"] = held
            samples.append((time.monotonic() - t0, parts))
        for s in senders:
            fleet.stop(s)
        assert stop_gracefully(fleet, ingress) == 0
        head = drain(state, job)
        expected = follower.finish(head)
        n_expected = len(expected["seq"])
        wait_until(lambda: received.stat().st_size >= n_expected * RESULT_FRAME.itemsize, 120,
                   "the forwarder to deliver every result", [job, receiver])
        time.sleep(1.0)                       # anything beyond the expected would show now
        assert stop_gracefully(fleet, job) == 0
        fleet.stop(receiver)
        cli_out = tmp_path / "results.bin"
        results_cmd = run_main(["results", "--state-dir", state, "--out", cli_out])
        assert results_cmd.returncode == 0, results_cmd.stderr[-3000:]
    except BaseException:
        for p in fleet.procs:
            print(f"--- {p.name} log ends ---\n{log_tail(p.log_path)}", file=sys.stderr)
        raise
    finally:
        fleet.stop_all()

    # Exact: the forwarder delivered every result once, in order, equal to the reference
    # over the whole logged arrival order (with 1 shard, batch order is seq order).
    got = np.fromfile(received, dtype=RESULT_FRAME)
    assert read_consumed(log_dir) == head
    assert follower.pos == head
    assert len(got) == n_expected and _fields_equal(got, expected, slice(None))
    forwarder_warned = "fell behind the results retention" in job.log_path.read_text(errors="replace")
    assert not forwarder_warned

    # What retention kept: whole batches from `retained-from` on, equal to the reference's tail;
    # `marketspread results` writes them and says how many batches were deleted before.
    kept = read_retained(out_dir)
    first = retained_from(out_dir)
    assert first > 0 and kept.first == first
    seqs = kept.side[:, 0]
    assert len(seqs) and np.all(np.diff(seqs) > 0)
    tail = expected["seq"] >= seqs[0]
    assert np.array_equal(expected["seq"][tail], seqs)
    assert _fields_equal(kept.frames, expected, tail)
    cli_frames = np.fromfile(cli_out, dtype=RESULT_FRAME)
    assert _fields_equal(cli_frames, expected, tail)
    cli_log = results_cmd.stdout + results_cmd.stderr
    assert re.search(rf"batches 0\.\.{first - 1} \({first} batches\) were deleted by retention", cli_log)

    # Bounded: after the warm-up the state folder never exceeds what retention allows
    # (plus whatever the reference's hold kept), though the run wrote many times that.
    logged_bytes = head * RECORD_BYTES
    after = [p for t, p in samples if t >= WARMUP_S]
    peak = max(p["total"] for p in after)
    third = max(1, len(after) // 3)
    first_third, last_third = after[:third], after[-third:]
    print(f"FIGURES retention: {head:,} events in {STREAM_S:.0f} s ({head / STREAM_S:,.0f}/s), "
          f"{logged_bytes / 2**20:,.0f} MiB logged; state folder after warm-up: peak {peak / 2**20:,.1f} MiB, "
          f"first third max {max(p['total'] for p in first_third) / 2**20:,.1f}, last third max "
          f"{max(p['total'] for p in last_third) / 2**20:,.1f} (bound {STATE_BOUND / 2**20:,.0f}); "
          f"peaks: log {max(p['ingress'] for p in after) / 2**20:,.1f}, results "
          f"{max(p['results'] for p in after) / 2**20:,.1f}, "
          f"checkpoint {max(p['checkpoint'] for p in after) / 2**20:,.1f} MiB; segments left {segment_firsts(log_dir)}; "
          f"results kept from batch {first:,}; {n_expected:,} results exact; reference lag max {follower.max_lag:,}, "
          f"log held for it beyond the job's needs at most {max(p['held'] for p in after) / 2**20:,.1f} MiB",
          flush=True)
    assert after
    for t, p in samples:
        if t >= WARMUP_S:
            assert p["total"] <= STATE_BOUND + p["held"], f"state folder {p} at {t:.0f} s over the bound"
            assert p["results"] <= RESULTS_BYTES + (4 << 20)
    assert logged_bytes >= 3 * STATE_BOUND, "the run must write far more than the bound for the check to mean anything"
    assert segment_firsts(log_dir)[0] > 0


def _scratch(state: Path, pid: int) -> tuple[list[Path], list[Path]]:
    """The job process's Spark scratch folder and its socket folder, both in the temp dir, named by its pid."""
    import tempfile
    tmp = Path(tempfile.gettempdir())
    return sorted(tmp.glob(f"ms-spark-scratch-{pid}-*")), sorted(tmp.glob(f"ms-spark-{pid}-*"))


@pytest.mark.slow
def test_killed_jobs_spark_temp_folders_are_removed_at_next_start(tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    nbbo, orders = ensure_input(data, 350)
    fleet = fleet_for(tmp_path)
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics")
        job = fleet.spawn("job-0", ["job", "--state-dir", state, "--master", "local[2]", "--no-metrics"])
        wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"), 240,
                   "the job to start its query", [job], interval=0.3)
        sender = start_sender(fleet, ports["orders"], orders, "--rate", 5_000, "--loop", name="send")
        wait_until(lambda: read_consumed(state / "ingress") > 0, 120, "a first commit", [job, sender])
        killed_pid = job.popen.pid
        scratch, sockets = _scratch(state, killed_pid)
        assert scratch and sockets, "the job's scratch folders, named by its pid, must exist while it runs"
        assert any(scratch[0].glob("blockmgr-*")), "Spark's block manager folder must be in the job's scratch"
        kill_session(job)
        left = [p for p in scratch + sockets if p.exists()]
        assert left == scratch + sockets, "a SIGKILL'd job cannot clean up: its folders stay until the next start"
        job = fleet.spawn("job-1", ["job", "--state-dir", state, "--master", "local[2]", "--no-metrics"])
        wait_until(lambda: "job started" in job.log_path.read_text(errors="replace"), 240,
                   "the job to restart its query", [job], interval=0.3)
        assert [p for p in scratch + sockets if p.exists()] == []
        new_scratch, new_sockets = _scratch(state, job.popen.pid)
        assert new_scratch and new_sockets
        before = read_consumed(state / "ingress")
        wait_until(lambda: read_consumed(state / "ingress") > before, 120, "a commit after the restart",
                   [job, sender])
        fleet.stop(sender)
        assert stop_gracefully(fleet, job) == 0
        assert [p for p in new_scratch + new_sockets if p.exists()] == [], "a clean stop removes its own folders"
    except BaseException:
        for p in fleet.procs:
            print(f"--- {p.name} log ends ---\n{log_tail(p.log_path)}", file=sys.stderr)
        raise
    finally:
        fleet.stop_all()
