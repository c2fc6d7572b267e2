"""The generator, sender and receiver, over real loopback sockets."""
from __future__ import annotations

import argparse
import re
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.wire.fixish import NBBO_LEN, ORDER_LEN, RESULT_LEN, Nbbo, Order, OrderResult, decode_payload, encode_result, iter_frames, read_results
from engine.tools import generate as gen_mod
from engine.tools import receiver as recv_mod
from engine.tools import sender as send_mod
from engine.tools.generate import generate, read_symbols, wallaroo_scenario
from engine.tools.receiver import Receiver
from engine.tools.sender import frame_bounds, send_files
from collector.influx.server import free_port

TIME_RE = re.compile(rb"^\d{8}-\d{2}:\d{2}:\d{2}\.\d{3}$")


def _decode_all(path: Path) -> list:
    return [decode_payload(p) for p in iter_frames(path.read_bytes())]


def _rule(messages) -> list[tuple]:
    """Wallaroo's rule, written out plainly: the test's own reference."""
    state: dict[bytes, tuple[bool, float, float]] = {}
    out = []
    for m in messages:
        if isinstance(m, Nbbo):
            diff = m.offer - m.bid
            state[m.symbol] = (diff >= 0.05 or diff / ((m.bid + m.offer) / 2) >= 0.05, m.bid, m.offer)
        else:
            reject, bid, offer = state.get(m.symbol, (True, 0.0, 0.0))
            if reject:
                out.append((m.side, m.account, m.order_id, m.symbol, m.qty, m.price, bid, offer))
    return out


def _parse(module, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    return p.parse_args(argv)


class _Sink:
    """A plain TCP server that records the bytes of each connection it accepts."""

    def __init__(self, port: int = 0, connections: int = 1, first_limit: int | None = None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self._first_limit = first_limit
        self._thread = threading.Thread(target=self._run, args=(connections,), daemon=True)
        self._thread.start()

    def _run(self, connections: int) -> None:
        self.sock.settimeout(30)
        for i in range(connections):
            conn, _ = self.sock.accept()
            buf = bytearray()
            with conn:
                while chunk := conn.recv(1 << 20):
                    buf += chunk
                    if i == 0 and self._first_limit and len(buf) >= self._first_limit:
                        break          # close with unread data: the sender sees a reset
            self.received.append(bytes(buf))
        self.sock.close()

    def join(self) -> list[bytes]:
        self._thread.join(30)
        assert not self._thread.is_alive()
        return self.received


@pytest.fixture()
def small(tmp_path):
    nbbo, orders = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
    rep = generate(nbbo, orders, symbols=50, nbbo=2000, orders=3000, wide_share=0.2, seed=7)
    return rep, nbbo, orders


# ----------------------------------------------------------------------------- generate

def test_generate_is_deterministic(tmp_path):
    def run(seed, name):
        n, o = tmp_path / f"{name}.n", tmp_path / f"{name}.o"
        generate(n, o, symbols=30, nbbo=500, orders=500, seed=seed)
        return n.read_bytes(), o.read_bytes()
    assert run(3, "a") == run(3, "b")
    assert run(3, "a") != run(4, "c")


def test_generate_counts_and_layout(small):
    rep, nbbo, orders = small
    assert (rep.nbbo, rep.orders, rep.symbols) == (2050, 3000, 50)
    assert nbbo.stat().st_size == rep.nbbo * (4 + NBBO_LEN)
    assert orders.stat().st_size == rep.orders * (4 + ORDER_LEN)
    quotes = _decode_all(nbbo)
    assert all(isinstance(q, Nbbo) and len(q.symbol) == 4 and TIME_RE.match(q.transact_time) for q in quotes)
    symbols = [q.symbol for q in quotes[:50]]
    assert len(set(symbols)) == 50                        # every symbol quoted first, once
    assert {q.symbol for q in quotes[50:]} <= set(symbols)
    assert all(re.fullmatch(rb" *[A-Z]{1,4}", s) for s in symbols)
    times = [q.transact_time for q in quotes]
    assert times == sorted(times)
    orders_ = _decode_all(orders)
    assert all(isinstance(o, Order) for o in orders_)
    assert {o.side for o in orders_} == {1, 2}
    assert all(re.fullmatch(rb"[0-9A-Za-z]{6}", o.order_id) for o in orders_)
    assert len({o.order_id for o in orders_}) == len(orders_)
    assert all(o.symbol in set(symbols) and o.qty > 0 and o.price > 0 and TIME_RE.match(o.transact_time)
               for o in orders_)


def test_wide_share_holds_for_every_quote(small):
    rep, nbbo, orders = small
    assert len(rep.wide_symbols) == 10
    for q in _decode_all(nbbo):
        wide = _rule([q, Order(1, 0, b"x" * 6, q.symbol, 1.0, 1.0, b"")]) != []
        assert wide == (q.symbol in rep.wide_symbols), q
    rejected = _rule(_decode_all(nbbo) + _decode_all(orders))
    assert {r[3] for r in rejected} == set(rep.wide_symbols)
    assert len(rejected) == sum(o.symbol in rep.wide_symbols for o in _decode_all(orders))


def test_generate_from_symbols_file(tmp_path, fixtures):
    symbols = read_symbols(fixtures / "350-symbols.txt")
    assert len(symbols) == 350 and all(len(s) == 4 for s in symbols) and b"  AA" in symbols
    n, o = tmp_path / "n", tmp_path / "o"
    args = _parse(gen_mod, ["--out-nbbo", str(n), "--out-orders", str(o), "--symbols-file",
                            str(fixtures / "350-symbols.txt"), "--nbbo", "100", "--orders", "10"])
    assert gen_mod.run(args) == 0
    assert [q.symbol for q in _decode_all(n)[:350]] == symbols


def test_wallaroo_scenario_matches_the_rule(tmp_path):
    n, o = tmp_path / "n", tmp_path / "o"
    expected = wallaroo_scenario(n, o, seed=1)
    quotes, orders = _decode_all(n), _decode_all(o)
    assert len(quotes) == 2000 and len(orders) == 2000 and len(expected) == 1000
    tight = quotes[:1000]
    assert all(q.bid == 1000.0 and 0 <= q.offer - q.bid < 0.05 for q in tight)
    assert all((q.bid, q.offer) == (1000.0, 1001.0) for q in quotes[1000:])
    assert _rule(quotes + orders) == expected
    assert expected == [(o.side, o.account, o.order_id, o.symbol, o.qty, o.price, 1000.0, 1001.0)
                        for o in orders[1000:]]
    args = _parse(gen_mod, ["--out-nbbo", str(n), "--out-orders", str(o), "--wallaroo-scenario",
                            "--seed", "1", "--out-expected", str(tmp_path / "e")])
    assert gen_mod.run(args) == 0
    assert [tuple(r[:8]) for r in read_results((tmp_path / "e").read_bytes())] == expected


# ----------------------------------------------------------------------------- sender

def test_frame_bounds_mixed_and_malformed(small):
    _, nbbo, orders = small
    data = orders.read_bytes()[:57 * 3] + nbbo.read_bytes()[:46 * 40] + orders.read_bytes()[:57 * 5]
    b = frame_bounds(data)
    assert len(b) == 49 and b[-1] == len(data)
    assert [len(p) for p in iter_frames(data)] == list(np.diff(b) - 4)
    with pytest.raises(ValueError, match="malformed"):
        frame_bounds(data + b"\x00\x00")
    assert frame_bounds(data + b"\x00\x00", raw=True)[-1] == len(data) + 2


def test_send_delivers_whole_files_in_order(small):
    _, nbbo, orders = small
    sink = _Sink()
    rep = send_files("127.0.0.1", sink.port, [nbbo, orders], progress=False)
    (got,) = sink.join()
    assert got == nbbo.read_bytes() + orders.read_bytes()
    assert rep.messages == 2050 + 3000 and rep.bytes == len(got) and rep.error is None


def test_send_loop_stops_at_max_messages(small):
    _, _, orders = small
    data = orders.read_bytes()
    sink = _Sink()
    rep = send_files("127.0.0.1", sink.port, [orders], loop=True, max_messages=7500, progress=False)
    (got,) = sink.join()
    assert rep.messages == 7500
    assert got == data + data + data[:1500 * 57]


def test_send_rate_is_roughly_honoured(small):
    _, nbbo, _ = small
    sink = _Sink()
    rep = send_files("127.0.0.1", sink.port, [nbbo], rate=20_000, loop=True, duration=0.5, progress=False)
    (got,) = sink.join()
    assert len(got) == rep.bytes and len(got) % 46 == 0
    # The schedule cannot run ahead (upper bound); a loaded machine may lag (loose lower bound).
    assert 3_000 <= rep.messages <= 10_000 + 20_000 * send_mod.TICK + 200


def test_send_batches_per_interval(small):
    _, nbbo, _ = small
    sink = _Sink()
    rep = send_files("127.0.0.1", sink.port, [nbbo], batch_size=100, interval=0.02, loop=True,
                     duration=0.3, progress=False)
    sink.join()
    assert rep.messages % 100 == 0
    assert 300 <= rep.messages <= 100 * (0.3 / 0.02 + 2)


def test_send_waits_for_a_late_listener(small):
    _, _, orders = small
    port = free_port()
    result = {}
    t = threading.Thread(target=lambda: result.update(rep=send_files("127.0.0.1", port, [orders],
                                                                        progress=False, connect_timeout=10)))
    t.start()
    time.sleep(0.3)
    sink = _Sink(port)
    t.join(15)
    assert sink.join() == [orders.read_bytes()] and result["rep"].messages == 3000


def test_send_resumes_at_a_frame_boundary_after_a_drop(small):
    _, _, orders = small
    data = orders.read_bytes()
    sink = _Sink(connections=2, first_limit=100_000)
    total = 300_000                                     # 17 MB: more than loopback buffers hold
    rep = send_files("127.0.0.1", sink.port, [orders], loop=True, max_messages=total,
                     progress=False, connect_timeout=10)
    first, second = sink.join()
    assert rep.messages == total and rep.reconnects == 1 and rep.error is None
    assert len(second) % 57 == 0
    n2 = len(second) // 57
    stream = np.frombuffer(data, np.uint8).reshape(-1, 57)
    expected = stream[np.arange(total - n2, total) % len(stream)].tobytes()
    assert second == expected                          # a whole-frame suffix of the stream
    assert "lost in flight" in rep.summary()


def test_send_gives_up_when_nobody_listens(small):
    _, _, orders = small
    args = _parse(send_mod, ["--port", str(free_port()), "--file", str(orders), "--connect-timeout", "0.3"])
    assert send_mod.run(args) == 1


def test_send_raw_sends_malformed_bytes_as_is(tmp_path, small):
    _, nbbo, _ = small
    bad = tmp_path / "bad.msg"
    bad.write_bytes(nbbo.read_bytes()[:46 * 10] + b"\x00\x00\x01\x00garbage")
    with pytest.raises(ValueError):
        send_files("127.0.0.1", 1, [bad], progress=False)
    sink = _Sink()
    args = _parse(send_mod, ["--port", str(sink.port), "--file", str(bad), "--raw", "--quiet"])
    assert send_mod.run(args) == 0
    assert sink.join() == [bad.read_bytes()]


# ----------------------------------------------------------------------------- receiver

def _results(n: int, offset: int) -> list[bytes]:
    return [encode_result(OrderResult(1 + i % 2, i, f"{offset + i:06d}".encode(), b"  AA", 100.0,
                                      10.0, 1000.0, 1001.0, i)) for i in range(n)]


def _send_pieces(port: int, frames: list[bytes], piece: int) -> None:
    data = b"".join(frames)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(data), piece):     # odd piece sizes split frames across reads
            s.sendall(data[i:i + piece])


def test_receiver_takes_frames_from_concurrent_connections(tmp_path):
    a, b = _results(3000, 0), _results(2000, 500_000)
    out = tmp_path / "out.bin"
    with Receiver("127.0.0.1", 0, out) as rec:
        threads = [threading.Thread(target=_send_pieces, args=(rec.port, a, 1000)),
                   threading.Thread(target=_send_pieces, args=(rec.port, b, 777))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert rec.wait_for(5000, timeout=10)
    data = out.read_bytes()
    assert len(data) == 5000 * (4 + RESULT_LEN) and rec.count == 5000 and rec.malformed == 0
    frames = [data[i:i + 59] for i in range(0, len(data), 59)]
    assert sorted(frames) == sorted(a + b)
    assert [f for f in frames if f in set(a)] == a          # each connection's order is kept
    assert rec.connections == 2


def test_receiver_drops_malformed_frames(tmp_path):
    good = _results(10, 0)
    junk = b"\x00\x00\x00\x0a" + b"x" * 10                  # wrong length: skipped, counted
    out = tmp_path / "out.bin"
    with Receiver("127.0.0.1", 0, out) as rec:
        _send_pieces(rec.port, good[:5] + [junk] + good[5:] + [good[0][:30]], 13)
        assert rec.wait_for(10, timeout=10)
        deadline = time.monotonic() + 5
        while rec.malformed < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert rec.malformed == 2                                  # the junk and the truncated tail
    assert out.read_bytes() == b"".join(good)


def test_receive_expect_exits_once_all_arrived(tmp_path):
    port = free_port()
    out = tmp_path / "out.bin"
    args = _parse(recv_mod, ["--port", str(port), "--out", str(out), "--expect", "400", "--timeout", "20"])
    code = {}
    t = threading.Thread(target=lambda: code.update(rc=recv_mod.run(args)))
    t.start()
    frames = _results(400, 0)
    for attempt in range(100):
        try:
            _send_pieces(port, frames, 4096)
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    t.join(20)
    assert code["rc"] == 0 and out.read_bytes() == b"".join(frames)


def test_receive_expect_times_out(tmp_path):
    args = _parse(recv_mod, ["--port", "0", "--out", str(tmp_path / "o"), "--expect", "1", "--timeout", "0.2"])
    t0 = time.monotonic()
    assert recv_mod.run(args) == 1
    assert time.monotonic() - t0 < 5
