"""The ingress's connection limits under a hostile client, and senders while it is muted for disk space.

Item by item: one client (or thirty loopback addresses) holding every slot with
connections that never finish a frame cannot keep a real sender out; a connection
waiting while the ingress is muted for disk space is reset, and a new one refused, so a
client's timeout never means "stored later".
"""
from __future__ import annotations

import errno
import socket
import threading
import time

import pytest

from engine.formats.log import read_head
from engine.ingress.stats import read_stats
from engine.tools.generate import generate
from engine.wire.fixish import Order, encode_order
from tests.tmpfs import mounted_tmpfs

from .harness import fleet_for, log_tail, logged_messages, start_ingress, start_sender, stop_gracefully, wait_until

CAP = 40
PER_CLIENT = 8
FIRST_FRAME_S = 3


def _order(mark: bytes) -> bytes:
    return encode_order(Order(1, 1, mark.ljust(6, b"_")[:6], b"AAPL", 1.0, 2.0, b"0" * 21))


def _outcome(port: int, data: bytes, source: str = "127.0.0.1", timeout: float = 20) -> str:
    """Send from `source`, half-close, wait: 'acked' (clean close), 'reset', or 'timeout' (limbo)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        return "acked"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        if e.errno in (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN, errno.ECONNREFUSED):
            return "reset"
        raise


class Hog:
    """Hold connections from given source addresses, each sending one byte of a frame every 2 s, reopening any dropped."""

    def __init__(self, port: int, sources: list[str], per_source: int):
        self.port, self.sources, self.per_source = port, sources, per_source
        self.stop = threading.Event()
        self.opened = self.lost = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _open(self, source: str) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2, source_address=(source, 0))
            s.send(b"\x00")                         # the start of a length: never a whole frame
            self.opened += 1
            return s
        except OSError:
            return None

    def _run(self) -> None:
        held: list[tuple[str, socket.socket | None]] = [(src, None) for src in self.sources
                                                        for _ in range(self.per_source)]
        while not self.stop.is_set():
            for i, (src, s) in enumerate(held):
                if s is not None:
                    try:
                        s.send(b"\x00")
                        continue
                    except OSError:
                        s.close()
                        self.lost += 1
                held[i] = (src, self._open(src))
            self.stop.wait(2.0)
        for _, s in held:
            if s is not None:
                s.close()


@pytest.mark.slow
def test_connections_that_never_send_a_frame_cannot_lock_a_real_sender_out(tmp_path):
    data, state = tmp_path / "data", tmp_path / "state"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=50, nbbo=20_000, orders=20_000, wide_share=0.1, seed=5)
    fleet = fleet_for(tmp_path, env={"MS_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT),
                                     "MS_FIRST_FRAME_TIMEOUT": str(FIRST_FRAME_S)})
    hogs: list[Hog] = []
    outcomes: list[str] = []
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics", "--max-connections", CAP)
        sender = start_sender(fleet, ports["orders"], orders, "--loop", "--rate", 2_000, "--quiet", name="send")
        wait_until(lambda: (read_stats(state / "ingress") or {}).get("accepted", {}).get("orders", 0) > 500,
                   60, "the sender flowing", [ingress, sender])
        # one address asking for 5x the cap, then thirty addresses asking for the cap each
        hogs.append(Hog(ports["orders"], ["127.0.0.9"], 5 * CAP))
        hogs.append(Hog(ports["orders"], [f"127.0.1.{i}" for i in range(1, 31)], CAP // 4))
        time.sleep(1.0)
        for i in range(12):                       # a new sender every second of the flood
            outcomes.append(_outcome(ports["orders"], _order(b"NEW%03d" % i), source="127.0.0.2"))
            time.sleep(1.0)
        st = read_stats(state / "ingress")
        for h in hogs:
            h.stop.set()
        assert ingress.alive(), log_tail(ingress.log_path)
        fleet.stop(sender)
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
    finally:
        for h in hogs:
            h.stop.set()
        fleet.stop_all()
    print(f"\nFIGURES limits: new senders {outcomes}; hog connections opened {[h.opened for h in hogs]}, "
          f"dropped {[h.lost for h in hogs]}; refused {st['connections_refused']}, dropped idle {st['connections_idle']}")
    assert outcomes == ["acked"] * 12, outcomes
    assert "reconnect" not in sender.log_path.read_text(), log_tail(sender.log_path)
    assert hogs[1].lost > 0                  # frameless connections were dropped, not kept
    marks = {m.order_id for m in logged_messages(state / "ingress") if isinstance(m, Order)}
    assert {b"NEW%03d" % i for i in range(12)} <= marks


@pytest.mark.slow
def test_while_muted_for_disk_space_waiting_connections_are_reset_and_new_ones_refused(tmp_path):
    fleet = fleet_for(tmp_path)
    with mounted_tmpfs(tmp_path / "disk", 64) as disk:
        state = disk / "state"
        try:
            ingress, ports = start_ingress(fleet, state, "--no-metrics", "--min-free-bytes", 24 << 20,
                                           "--min-free-percent", 50)
            waiting = socket.create_connection(("127.0.0.1", ports["orders"]), timeout=20)
            waiting.sendall(_order(b"WAIT01"))                          # durable, not yet acknowledged
            wait_until(lambda: read_head(state / "ingress") >= 1, 30, "the first order logged", [ingress])
            ballast = disk / "ballast"
            ballast.write_bytes(bytes(45 << 20))
            wait_until(lambda: "disk full" in ingress.log_path.read_text(), 30, "the ingress to mute", [ingress])
            try:
                waiting.sendall(_order(b"WAIT02"))
                got = waiting.recv(1)
                waited = "closed" if got == b"" else "data"
            except socket.timeout:
                waited = "timeout"
            except OSError as e:
                waited = "reset" if e.errno in (errno.ECONNRESET, errno.EPIPE) else str(e)
            waiting.close()
            during = _outcome(ports["orders"], _order(b"DURING"), timeout=10)
            head_muted = read_head(state / "ingress")
            ballast.unlink()
            wait_until(lambda: "disk space back" in ingress.log_path.read_text(), 30, "space back", [ingress])
            time.sleep(1.0)
            after = _outcome(ports["orders"], _order(b"AFTER1"))
            assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
        finally:
            fleet.stop_all()
        marks = [m.order_id for m in logged_messages(state / "ingress")]
    assert waited == "reset", waited             # never limbo: a reset the sender sees at once
    assert during == "reset", during             # refused while muted, not queued for later
    assert head_muted == 1 and marks == [b"WAIT01", b"AFTER1"], marks   # nothing stored later
    assert after == "acked"
