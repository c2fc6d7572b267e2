"""A hostile sender for 30 s cannot grow the dead-letter file past its cap.

It streams valid orders with one garbage byte after each, as fast as loopback takes
them: every frame is followed by a one-byte bad run, the worst case for the dead-letter
file (issue 13 measured 245 MB in 10 s without a cap). `marketspread ingress
--deadletter-max-bytes 1048576` must keep the file and its rotated copy within 1 MiB
while it keeps logging the good frames and counting every bad run.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from engine.wire.fixish import Order, encode_order
from engine.ingress.stats import read_stats
from engine.formats.log import read_head

from .harness import fleet_for, log_tail, sleep_watching, start_ingress, stop_gracefully

CAP = 1 << 20
SECONDS = 30


def _hostile(port: int, stop: threading.Event, sent: list[int], outcome: list) -> None:
    chunk = b"".join(encode_order(Order(1, i, b"HOSTIL", b"EVIL", 1.0, 2.0, b"0" * 21)) + b"\xff"
                     for i in range(2_000))
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            while not stop.is_set():
                s.sendall(chunk)
                sent[0] += 2_000
            s.shutdown(socket.SHUT_WR)
            s.settimeout(30)
            while s.recv(4096):
                pass
        outcome.append("acked")
    except OSError as e:
        outcome.append(repr(e))


@pytest.mark.slow
def test_hostile_sender_cannot_grow_the_dead_letter_file_past_its_cap(tmp_path):
    state = tmp_path / "state"
    fleet = fleet_for(tmp_path)
    dead = state / "ingress" / "deadletter.jsonl"
    rotated = dead.with_name(dead.name + ".1")
    stop, sent, outcome = threading.Event(), [0], []
    sizes: list[int] = []

    def size() -> int:
        # The rotated copy first: a rotation (rename, then a new file) between the two
        # reads then counts one file too few once, never one file twice.
        total = 0
        for p in (rotated, dead):
            try:
                total += p.stat().st_size
            except FileNotFoundError:     # not made yet, or renamed between exists and stat
                pass
        return total
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics", "--deadletter-max-bytes", CAP,
                                       "--max-backlog", 1 << 40)       # no job here: never mute
        t = threading.Thread(target=_hostile, args=(ports["orders"], stop, sent, outcome), daemon=True)
        t.start()
        t_end = time.monotonic() + SECONDS
        while time.monotonic() < t_end:
            sizes.append(size())
            sleep_watching(0.1, [ingress])
        stop.set()
        t.join(60)
        assert not t.is_alive() and outcome == ["acked"], outcome
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
    finally:
        stop.set()
        fleet.stop_all()
    assert max(sizes) <= CAP and size() <= CAP, f"dead letters grew to {max(sizes):,} B (cap {CAP:,})"
    st = read_stats(state / "ingress")
    kept = sum(len(p.read_text().splitlines()) for p in (dead, rotated) if p.exists())
    print(f"\nFIGURES deadletter: {SECONDS} s, {sent[0]:,} good frames and {sent[0]:,} bad bytes sent; "
          f"bad runs counted {st['bad_total']:,}, lines kept {kept:,}, dropped {st['deadletter_dropped']:,}, "
          f"rotations {st['deadletter_rotations']}; file + rotated copy peak {max(sizes):,} B, "
          f"end {size():,} B (cap {CAP:,})")
    assert st["accepted_total"] == read_head(state / "ingress") == sent[0]     # every good frame logged
    assert st["bad_total"] == sent[0] and st["bad_reasons"] == {"garbage bytes": sent[0]}
    assert st["deadletter_rotations"] >= 1 and kept < st["bad_total"]
