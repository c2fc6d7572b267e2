"""A connection flood: idle and trickling connections cannot starve the senders or the descriptors.

`marketspread ingress --max-connections 40 --idle-timeout 3` takes two looping senders;
then, on each port, 5x the cap of connections that send nothing and 10 that trickle a
frame one byte every half second. Beyond the cap the ingress resets new connections
at once; the idle ones it drops after 3 s; the senders keep flowing throughout, the
process's descriptors stay bounded, and a new sender is acknowledged afterwards.
"""
from __future__ import annotations

import socket
import threading
import time

import pytest

from engine.wire.fixish import Nbbo, Order, encode_nbbo, encode_order
from engine.ingress.stats import read_stats
from engine.tools.generate import generate

from .harness import (fleet_for, log_tail, open_fds, send_outcome, sleep_watching, start_ingress,
                      start_sender, stop_gracefully, wait_until)

CAP = 40
IDLE_TIMEOUT = 3
FLOOD = 5 * CAP                 # idle connections per port
TRICKLE = 10                    # slow senders per port
FLOOD_SECONDS = 12
FD_BOUND = 2 * CAP + 64         # both ports full, plus the log, files, listeners and runtime


def _open_quietly(port: int) -> socket.socket | None:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return None
    return s


def _trickle(port: int, data: bytes, stop: threading.Event, dropped: list) -> None:
    """Send one byte every half second: slow, never idle."""
    s = _open_quietly(port)
    if s is None:
        dropped.append(port)
        return
    with s:
        i = 0
        while not stop.wait(0.5):
            try:
                s.send(data[i % len(data):i % len(data) + 1])
            except OSError:
                dropped.append(port)
                return
            i += 1


@pytest.mark.slow
def test_flood_of_idle_and_slow_connections_leaves_senders_flowing_and_fds_bounded(tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=50_000, orders=50_000, wide_share=0.1, seed=31)
    fleet = fleet_for(tmp_path)
    log_dir = state / "ingress"
    stop = threading.Event()
    held: list[socket.socket] = []
    trickles: list[threading.Thread] = []
    trickle_dropped: list[int] = []
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics", "--max-connections", CAP,
                                       "--idle-timeout", IDLE_TIMEOUT)
        senders = [start_sender(fleet, ports[s], f, "--loop", "--rate", 2_000, "--quiet", name=f"send-{s}")
                   for s, f in (("nbbo", nbbo), ("orders", orders))]
        wait_until(lambda: all(v > 1_000 for v in (read_stats(log_dir) or {}).get("accepted", {"x": 0}).values()),
                   60, "both senders flowing", [ingress, *senders])
        fds_before = open_fds(ingress.popen.pid)
        slow = {"nbbo": encode_nbbo(Nbbo(b"SLOW", b"0" * 21, 1.0, 2.0)),
                "orders": encode_order(Order(1, 1, b"SLOWLY", b"SLOW", 1.0, 2.0, b"0" * 21))}
        for s in ("nbbo", "orders"):
            for _ in range(TRICKLE):
                t = threading.Thread(target=_trickle, args=(ports[s], slow[s], stop, trickle_dropped), daemon=True)
                t.start()
                trickles.append(t)
        for _ in range(FLOOD):
            for s in ("nbbo", "orders"):
                if (sock := _open_quietly(ports[s])) is not None:
                    held.append(sock)

        accepted0 = read_stats(log_dir)["accepted"]
        peak_fds, t_end = 0, time.monotonic() + FLOOD_SECONDS
        while time.monotonic() < t_end:
            peak_fds = max(peak_fds, open_fds(ingress.popen.pid))
            sleep_watching(0.1, [ingress, *senders])
        st = read_stats(log_dir)
        flowed = {s: st["accepted"][s] - accepted0[s] for s in ("nbbo", "orders")}
        stop.set()
        for sock in held:
            sock.close()
        for t in trickles:
            t.join(5)
        wait_until(lambda: sum(read_stats(log_dir)["connections_open"].values()) <= 2 + 2 * TRICKLE, 30,
                   "the flood's connections to go", [ingress])
        after = send_outcome(ports["orders"], encode_order(Order(2, 2, b"AFTER1", b"AAPL", 1.0, 2.0, b"0" * 21)))
        for p in senders:
            fleet.stop(p)
        assert ingress.alive(), log_tail(ingress.log_path)
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
    finally:
        stop.set()
        for sock in held:
            sock.close()
        fleet.stop_all()

    assert peak_fds <= FD_BOUND, f"the ingress held {peak_fds} descriptors (bound {FD_BOUND})"
    st = read_stats(log_dir)
    refused = sum(st["connections_refused"].values()) + sum(st["connections_evicted"].values())  # or gave way
    idle = sum(st["connections_idle"].values())
    print(f"\nFIGURES flood: cap {CAP}/port, {2 * FLOOD} idle + {2 * TRICKLE} slow connections opened; "
          f"refused {refused}, dropped idle {idle}, slow ones dropped {len(trickle_dropped)}; "
          f"ingress fds {fds_before} before, peak {peak_fds} (bound {FD_BOUND}); "
          f"senders' messages during {FLOOD_SECONDS} s of flood {flowed}")
    assert refused >= 2 * (FLOOD - CAP) and idle >= CAP
    assert all(v > 0 for v in flowed.values()), flowed                  # kept flowing ...
    for p in senders:                                                    # ... on their first connection
        assert "reconnect" not in p.log_path.read_text(), log_tail(p.log_path)
    assert after == "acked"
