"""The state folder's disk fills while senders stream: nothing is acknowledged that is not stored.

The state folder (ingress log, results, Spark checkpoint) is a small real tmpfs; a
ballast file fills it while two clients stream on both ports, one connection after
another, each half-closing and waiting for the ingress's answer: a clean close (it
acknowledges that all the connection sent is durable) or a reset. The low-space mark is
off (`--min-free-bytes 0 --min-free-percent 0`), so real ENOSPC and short writes are
what the ingress and the job meet. Then the ballast goes, the ingress resumes by
itself, a new job finishes the log, and the results are exact.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from engine.wire.fixish import NBBO_STRUCT, ORDER_STRUCT, TYPE_LEN, frame, iter_frames
from engine.ingress.stats import read_stats
from engine.formats.log import PAYLOAD_OFFSET, LogReader, read_head
from engine.tools.generate import generate
from tests.tmpfs import fill, mounted_tmpfs

from .harness import (check_exact, drain, fleet_for, log_tail, send_outcome, start_ingress, start_job,
                      stop_gracefully, wait_for_file_text, wait_until)

# Room enough that, once the ballast goes, the job can drain even after the ingress took in
# every connection queued in the kernel while it was muted (up to 128 per port, ~16 MiB each
# port at 2,000 messages a connection): with the low-space mark off it takes all it can.
DISK_MB = 160
PER_CONNECTION = 2_000           # messages a connection sends before it half-closes
FILL_AT = 150_000                # records logged when the ballast goes in


class _AckClient(threading.Thread):
    """Sends consecutive slices of a stream's messages, one connection each; records every answer."""

    def __init__(self, port: int, payloads: list[bytes]):
        super().__init__(daemon=True)
        self.port, self.payloads = port, payloads
        self.stop = threading.Event()
        self.conns: list[tuple[list[bytes], str]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        k, n = 0, len(self.payloads)
        try:
            while not self.stop.is_set():
                # each connection's messages unique (its number in the time field): thousands of
                # connections refused while muted must not look like a later connection's
                at = 5 if len(self.payloads[0]) == NBBO_STRUCT.size else ORDER_STRUCT.size - 21
                msgs = [p[:at] + b"%010d%011d" % (k, i) + p[at + 21:] for i, p in
                        enumerate(self.payloads[(k * PER_CONNECTION + i) % n] for i in range(PER_CONNECTION))]
                self.conns.append((msgs, send_outcome(self.port, b"".join(map(frame, msgs)), timeout=300)))
                k += 1
        except BaseException as e:          # anything but a clean close or a reset
            self.error = e

    def count(self, outcome: str) -> int:
        return sum(1 for _, o in self.conns if o == outcome)


def _stream_records(log_dir, kind: int) -> list[bytes]:
    rec = LogReader(log_dir).read(0, read_head(log_dir))
    rec = rec[rec[:, PAYLOAD_OFFSET] == kind]
    return [r[PAYLOAD_OFFSET:PAYLOAD_OFFSET + TYPE_LEN[kind]].tobytes() for r in rec]


def _check_stream(logged: list[bytes], conns) -> int:
    """The stream's log is, connection by connection, all of an acknowledged one and a prefix of a
    reset one (nothing else, nothing out of order); return the messages kept of reset ones."""
    i = kept_of_reset = 0
    for msgs, outcome in conns:
        if outcome == "acked":
            assert logged[i:i + len(msgs)] == msgs, "an acknowledged connection's messages are not all logged"
            i += len(msgs)
        else:
            j = 0
            while j < len(msgs) and i + j < len(logged) and logged[i + j] == msgs[j]:
                j += 1
            i, kept_of_reset = i + j, kept_of_reset + j
    assert i == len(logged), "the log holds messages no connection sent in that place"
    return kept_of_reset


def _segment_bytes(log_dir) -> int:
    return sum(p.stat().st_size for p in log_dir.glob("seg-*.log"))


@pytest.mark.slow
def test_disk_full_acknowledges_only_what_is_stored_and_recovers_exactly(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=50_000, orders=50_000, wide_share=0.1, seed=29)
    payloads = {"nbbo": list(iter_frames(nbbo.read_bytes())), "orders": list(iter_frames(orders.read_bytes()))}
    fleet = fleet_for(tmp_path)                   # logs stay off the small disk
    with mounted_tmpfs(tmp_path / "disk", DISK_MB) as disk:
        state, ballast = disk / "state", disk / "ballast"
        log_dir = state / "ingress"
        clients: dict[str, _AckClient] = {}
        try:
            ingress, ports = start_ingress(fleet, state, "--no-metrics", "--min-free-bytes", 0,
                                           "--min-free-percent", 0)
            job = start_job(fleet, state, "--no-metrics", "--max-rows-per-batch", 20_000, name="job-0")
            clients = {s: _AckClient(ports[s], payloads[s]) for s in ("nbbo", "orders")}
            for c in clients.values():
                c.start()
            wait_until(lambda: read_head(log_dir) > FILL_AT, 120, "senders' traffic", [ingress, job])

            filled = fill(ballast)                                    # the disk is full now
            wait_for_file_text(ingress.log_path, "disk full: ", 60, [ingress])
            time.sleep(1.0)
            assert ingress.alive(), log_tail(ingress.log_path)
            head_full = read_head(log_dir)
            assert _segment_bytes(log_dir) == head_full * 64, "a torn or unpublished tail was left"
            acked_before = {s: c.count("acked") for s, c in clients.items()}

            # The job meets the full disk in its results or checkpoint: one line, exit 2.
            job.popen.wait(timeout=180)
            job_lines = [ln for ln in job.log_path.read_text(errors="replace").splitlines() if ln.strip()]
            assert job.popen.returncode == 2, log_tail(job.log_path)
            assert job_lines[-1].startswith("marketspread job: error: disk full: "), job_lines[-1]

            time.sleep(2.0)                                           # muted, not dead
            assert ingress.alive() and read_head(log_dir) == head_full
            assert {s: c.count("acked") for s, c in clients.items()} == acked_before

            ballast.unlink()                                          # space returns
            wait_for_file_text(ingress.log_path, "disk space back", 60, [ingress])
            wait_until(lambda: all(c.count("acked") > acked_before[s] + 2 for s, c in clients.items()), 120,
                       "acknowledged connections after the resume", [ingress])
            for c in clients.values():
                c.stop.set()
                c.join(120)
            job = start_job(fleet, state, "--no-metrics", "--max-rows-per-batch", 20_000, name="job-1")
            assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
            head = drain(state, job)
            assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
        finally:
            for c in clients.values():
                c.stop.set()
            fleet.stop_all()

        for s, c in clients.items():
            assert c.error is None, f"{s} client: {c.error!r}"
            assert not c.is_alive()
        kinds = {"nbbo": 2, "orders": 1}
        kept = {s: _check_stream(_stream_records(log_dir, kinds[s]), c.conns) for s, c in clients.items()}
        st = read_stats(log_dir)
        ex = check_exact(state)
        resets = sum(c.count("reset") for c in clients.values())
        print(f"\nFIGURES disk-full: disk {DISK_MB} MiB, ballast {filled:,} B, head at the fill {head_full:,}, "
              f"final {head:,}; connections acked {sum(c.count('acked') for c in clients.values())}, "
              f"reset {resets} (their messages kept {kept}); write failures {st['write_failures']}, "
              f"records rolled back {st['records_rolled_back']}; results {ex.committed} = reference {ex.expected}")
        assert resets >= 1 and st["write_failures"] >= 1
        assert ex.logged == head and ex.exact, ex
        assert np.all(np.array([c.count("acked") for c in clients.values()]) > 0)


@pytest.mark.slow
def test_job_stopped_by_a_full_disk_in_its_first_batch_restarts_exactly(tmp_path):
    """One free page: Spark writes the checkpoint's metadata, then fails on the first offsets file
    and leaves its temp file, beside which Spark 4 refuses to start batch 0 again."""
    data = tmp_path / "data"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=20_000, orders=20_000, wide_share=0.1, seed=37)
    fleet = fleet_for(tmp_path)
    with mounted_tmpfs(tmp_path / "disk", 16) as disk:
        state, ballast = disk / "state", disk / "ballast"
        try:
            ingress, ports = start_ingress(fleet, state, "--no-metrics")
            for s, f in (("nbbo", nbbo), ("orders", orders)):
                assert send_outcome(ports[s], f.read_bytes()) == "acked"
            assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
            fill(ballast)
            os.truncate(ballast, ballast.stat().st_size - 4096)
            job = fleet.spawn("job-0", ["job", "--state-dir", state, "--master", "local[1]", "--no-metrics"])
            job.popen.wait(timeout=300)
            last = job.log_path.read_text(errors="replace").strip().splitlines()[-1]
            assert job.popen.returncode == 2 and last.startswith("marketspread job: error: disk full: "), last
            leftovers = [p.name for p in (state / "checkpoint").rglob("*.tmp")]
            assert leftovers, "the scenario did not happen: no unfinished checkpoint write"
            ballast.unlink()
            job = start_job(fleet, state, "--no-metrics", name="job-1")
            head = drain(state, job)
            assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
        finally:
            fleet.stop_all()
        ex = check_exact(state)
        print(f"\nFIGURES disk-full first batch: left by the failed write {leftovers}; "
              f"after the restart {ex.committed} results = reference {ex.expected}, head {head:,}")
        assert ex.logged == head == 40_350 and ex.exact, ex
