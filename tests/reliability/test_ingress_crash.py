"""The ingress is SIGKILLed mid-run: all it acknowledged survives, senders reconnect, the job goes on.

The ingress acknowledges a connection's bytes by closing it after the group commit that
made them durable (engine/ingress/server.py), and publishes durable records as `head`. So after
a kill and a restart the log must still hold, byte for byte, every record below the head
it had published, and every message of a connection it had closed.
"""
from __future__ import annotations

import hashlib
import re
import socket
import time

import pytest

from engine.wire.fixish import Order, encode_order
from engine.ingress.stats import read_stats
from engine.formats.log import LogReader, read_head
from engine.tools.generate import generate

from collector.influx.server import free_port
from .harness import (check_exact, drain, fleet_for, kill_session, log_tail, logged_messages,
                      start_ingress, start_job, start_sender, stop_gracefully, wait_until)

KILLS = 2
RATE = 2_000            # messages/s per stream


def _digest(log_dir, end: int) -> str:
    return hashlib.sha256(LogReader(log_dir).read(0, end).tobytes()).hexdigest()


def _send_acknowledged(port: int, msgs: list[Order]) -> None:
    """Send, half-close, and wait for the ingress to close: its acknowledgement that all is durable."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"".join(encode_order(m) for m in msgs))
        s.shutdown(socket.SHUT_WR)
        while s.recv(4096):
            pass


def _marked_orders(k: int) -> list[Order]:
    return [Order(1, 900_000 + 1000 * k + i, f"K{k}{i:04d}".encode(), b"ACKD", 100.0, 10.0 + i,
                  b"20151204-09:30:00.000") for i in range(500)]


@pytest.mark.slow
def test_ingress_sigkilled_keeps_everything_acknowledged_and_senders_reconnect(tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=100_000, orders=100_000, wide_share=0.1, seed=23)
    fleet = fleet_for(tmp_path)
    log_dir = state / "ingress"
    nbbo_port, orders_port = free_port(), free_port()
    acknowledged: list[list[Order]] = []
    published: list[tuple[int, str]] = []
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics", name="ingress-0",
                                       nbbo_port=nbbo_port, orders_port=orders_port)
        job = start_job(fleet, state, "--no-metrics", "--max-rows-per-batch", 20_000)
        senders = [start_sender(fleet, ports[s], f, "--loop", "--rate", RATE, "--duration", 40,
                                "--connect-timeout", 60, "--quiet", name=f"send-{s}")
                   for s, f in (("nbbo", nbbo), ("orders", orders))]
        for k in range(1, KILLS + 1):
            floor = read_head(log_dir) + 5_000
            wait_until(lambda: read_head(log_dir) > floor, 60, "senders' traffic", [ingress, job])
            acknowledged.append(_marked_orders(k))
            _send_acknowledged(orders_port, acknowledged[-1])
            kill_session(ingress)
            head = read_head(log_dir)                 # what it had published when it died
            published.append((head, _digest(log_dir, head)))
            time.sleep(1.0)                           # senders find the ports closed meanwhile
            ingress, _ = start_ingress(fleet, state, "--no-metrics", name=f"ingress-{k}",
                                       nbbo_port=nbbo_port, orders_port=orders_port)
            assert read_head(log_dir) >= head
            wait_until(lambda: (read_stats(log_dir) or {}).get("accepted", {}).get("nbbo", 0) > 500
                       and read_stats(log_dir)["accepted"]["orders"] > 500, 60,
                       "both senders to reconnect", [ingress, job])
        for s in senders:
            s.popen.wait(timeout=120)
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
        head = drain(state, job)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
    finally:
        fleet.stop_all()

    for end, digest in published:
        assert _digest(log_dir, end) == digest, "a record the ingress had published changed or vanished"
    msgs = logged_messages(log_dir)
    for batch in acknowledged:
        i = msgs.index(batch[0])
        assert msgs[i:i + len(batch)] == batch, "an acknowledged message is missing"
    reconnects = []
    for s in senders:
        text = s.log_path.read_text()
        assert s.popen.returncode == 0, text[-2000:]
        m = re.search(r"(\d+) reconnect\(s\)", text)
        reconnects.append(int(m.group(1)) if m else 0)
    assert all(r >= KILLS for r in reconnects), reconnects
    ex = check_exact(state)
    print(f"\nFIGURES ingress-crash: kills={KILLS} logged={ex.logged} results={ex.committed} "
          f"reconnects={reconnects} acknowledged_kept={sum(map(len, acknowledged))} "
          f"published_heads={[h for h, _ in published]}")
    assert ex.logged == head
    assert ex.exact, ex
