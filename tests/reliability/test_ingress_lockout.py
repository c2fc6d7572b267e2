"""`marketspread ingress` against local lockouts and web pages, with its default limits.

On one machine every sender is 127.0.0.1, so one client's share (64 connections) is
every local user's: idle sockets that reopen whatever is dropped must not keep a real
sender out. A web page's POST to the orders port, its body made of real order frames,
must store nothing.
"""
from __future__ import annotations

import socket
import threading

import pytest

from engine.ingress.stats import read_stats
from engine.wire.fixish import Order, encode_order

from .harness import fleet_for, log_tail, logged_messages, send_outcome, start_ingress, stop_gracefully

SHARE = 64                      # MS_MAX_CONNECTIONS_PER_CLIENT's default


def _order(mark: bytes) -> bytes:
    return encode_order(Order(1, 1, mark.ljust(6, b"_")[:6], b"AAPL", 1.0, 2.0, b"0" * 21))


class IdleSockets:
    """Hold `n` connections from 127.0.0.1 that never send a byte, reopening any the ingress drops."""

    def __init__(self, port: int, n: int):
        self.port, self.n, self.opened = port, n, 0
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        held: list[socket.socket] = []
        while not self.stop.is_set():
            alive = []
            for s in held:
                try:
                    s.setblocking(False)
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                (s.close() if gone else alive.append(s))
            held = alive
            while len(held) < self.n and not self.stop.is_set():
                try:
                    held.append(socket.create_connection(("127.0.0.1", self.port), timeout=2))
                    self.opened += 1
                except OSError:
                    break
            self.stop.wait(0.05)
        for s in held:
            s.close()


@pytest.mark.slow
def test_idle_local_sockets_filling_the_share_do_not_keep_local_senders_out_and_a_web_page_stores_nothing(tmp_path):
    state = tmp_path / "state"
    fleet = fleet_for(tmp_path)
    hold = None
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics")
        hold = IdleSockets(ports["orders"], SHARE)
        while hold.opened < SHARE:
            hold.stop.wait(0.05)
        outcomes = [send_outcome(ports["orders"], _order(b"REAL%02d" % i), timeout=20) for i in range(24)]
        body = b"".join(_order(b"EVIL%02d" % i) for i in range(20))
        post = (b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)) + body
        web = send_outcome(ports["orders"], post, timeout=20)
        hold.stop.set()
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
        st = read_stats(state / "ingress")                             # its last, written at the stop
    finally:
        if hold is not None:
            hold.stop.set()
        fleet.stop_all()
    print(f"\nFIGURES lockout: local senders {outcomes.count('acked')}/24 acked; idle sockets opened {hold.opened}; "
          f"gave way {st.get('connections_evicted')}, refused {st['connections_refused']}; web page {web}, "
          f"closed as HTTP or TLS {st.get('connections_foreign')}")
    assert outcomes == ["acked"] * 24                                  # before: 24 of 24 reset
    assert web == "reset" and st["connections_foreign"]["orders"] == 1
    marks = [m.order_id for m in logged_messages(state / "ingress")]
    assert marks == [b"REAL%02d" % i for i in range(24)]              # nothing of the web page
