"""The TCP ingress on real sockets: everything good lands in the log, in order, once."""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.config import Config
from engine.storage.diskspace import disk_space
from engine.wire.fixish import FrameScanner, Nbbo, Order, encode_nbbo, encode_order, frame, iter_frames
from engine.ingress.server import IngressServer
from engine.ingress.stats import read_stats, reason_category
from engine.formats.log import LogReader, read_head, wait_for, write_consumed
from tests.reliability.harness import send_outcome
from tests.tmpfs import fill, mounted_tmpfs

DEMO = "demo-2017"


def _cfg(tmp_path: Path, **kw) -> Config:
    kw.setdefault("fsync", False)
    return Config(state_dir=tmp_path, nbbo_port=0, orders_port=0, **kw)


@pytest.fixture
def server(tmp_path):
    srv = IngressServer(_cfg(tmp_path)).start()
    yield srv
    srv.stop()


def _send(port: int, data: bytes, wait_close: bool = True) -> None:
    """Send, half-close, and wait for the server's close (it then has `data` durably)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        if wait_close:
            s.settimeout(5)
            while s.recv(4096):
                pass


def _log_payloads(log_dir: Path) -> list[bytes]:
    recs = LogReader(log_dir).read(0, read_head(log_dir))
    return [r[8:8 + (42 if r[8] == 2 else 53)].tobytes() for r in recs]


def _tagged_nbbo(conn: int, i: int) -> bytes:
    return encode_nbbo(Nbbo(f"#{conn:02d}#".encode(), f"{i:021d}".encode(), float(i), float(i) + 1))


def _tagged_order(conn: int, i: int) -> bytes:
    return encode_order(Order(1, i, f"{i % 10**6:06d}".encode(), f"#{conn:02d}#".encode(),
                              1.0, 2.0, f"{i:021d}".encode()))


def _dead_letters(cfg: Config) -> list[dict]:
    if not cfg.deadletter_path.exists():
        return []
    return [json.loads(line) for line in cfg.deadletter_path.read_text().splitlines()]


def test_concurrent_senders_on_both_ports(tmp_path, fixtures):
    cfg = _cfg(tmp_path, fsync=True)
    srv = IngressServer(cfg).start()
    nbbo_file = (fixtures / DEMO / "1000nbbo-fixish.msg").read_bytes() * 5
    order_file = (fixtures / DEMO / "1000trades-fixish.msg").read_bytes() * 5
    jobs = [("nbbo", nbbo_file), ("orders", order_file)]
    jobs += [("nbbo", b"".join(_tagged_nbbo(c, i) for i in range(3000))) for c in range(3)]
    jobs += [("orders", b"".join(_tagged_order(c, i) for i in range(3000))) for c in range(3, 6)]
    t0 = time.time_ns()
    threads = [threading.Thread(target=_send, args=(srv.ports[s], d)) for s, d in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    srv.stop()

    sent = {s: [p for x, d in jobs if x == s for p in iter_frames(d)] for s in ("nbbo", "orders")}
    total = len(sent["nbbo"]) + len(sent["orders"])
    st = srv.stats()
    assert total == 28_000
    assert st.head == read_head(cfg.log_dir) == total and st.accepted_total == total
    assert st.accepted == {s: len(v) for s, v in sent.items()}
    assert st.bytes_in == {s: sum(len(d) for x, d in jobs if x == s) for s in ("nbbo", "orders")}
    assert st.connections_total == {"nbbo": 4, "orders": 4}
    assert st.connections_open == {"nbbo": 0, "orders": 0} and st.bad_total == 0

    got = _log_payloads(cfg.log_dir)
    assert sorted(got) == sorted(sent["nbbo"] + sent["orders"])
    # each connection's messages keep their order (tagged by symbol; the fixtures have no '#')
    for _, data in jobs:
        mine = list(iter_frames(data))
        kind, off = mine[0][0], (1 if mine[0][0] == 2 else 12)
        sym = mine[0][off:off + 4]
        same_sender = (lambda p: p[off:off + 4] == sym) if b"#" in sym else (lambda p: b"#" not in p[off:off + 4])
        assert [p for p in got if p[0] == kind and same_sender(p)] == mine
    ts = LogReader(cfg.log_dir).read(0, total)[:, :8].copy().view("<i8").ravel()
    assert (np.diff(ts) >= 0).all() and t0 <= ts[0] and ts[-1] <= time.time_ns()
    assert read_stats(cfg.log_dir)["head"] == total


BAD = [b"\x00\x00\x00\x33\x02" + b"\x55" * 50,              # wrong length
       frame(b"\x07" + b"\x55" * 41),                          # unknown type
       struct.pack(">I", 0xFFFFFFF0) + b"\x02\x55\x55",        # oversized
       b"not fixish \x01\x02\x03"]                             # garbage


def test_bad_frames_are_dead_lettered_and_good_ones_kept(tmp_path):
    cfg = _cfg(tmp_path)
    srv = IngressServer(cfg).start()
    streams = {"nbbo": ([_tagged_nbbo(0, i) for i in range(40)], encode_order(Order(
                   1, 1, b"XXXXXX", b"WRNG", 1.0, 1.0, b"0" * 21))),
               "orders": ([_tagged_order(1, i) for i in range(40)], encode_nbbo(Nbbo(
                   b"WRNG", b"0" * 21, 1.0, 1.0)))}
    bad_bytes = {}
    for stream, (good, wrong) in streams.items():
        bads = BAD + [wrong]
        parts = []
        for i, g in enumerate(good):
            parts.append(g)
            if i % 5 == 2:
                parts.append(bads[(i // 5) % len(bads)])
        bad_bytes[stream] = sum(len(bads[(i // 5) % len(bads)]) for i in range(len(good)) if i % 5 == 2)
        _send(srv.ports[stream], b"".join(parts))
    srv.stop()

    got = _log_payloads(cfg.log_dir)
    assert got == [g[4:] for g in streams["nbbo"][0] + streams["orders"][0]]
    dead = _dead_letters(cfg)
    st = srv.stats()
    assert st.bad_total == len(dead) == sum(st.bad_reasons.values()) and st.accepted_total == 80
    for stream in streams:
        mine = [d for d in dead if d["stream"] == stream]
        assert sum(d["length"] for d in mine) == bad_bytes[stream]
        assert {"wrong length", "unknown type", "oversized frame", "wrong stream"} <= {
            reason_category(d["reason"]) for d in mine}
        assert all(d["peer"].startswith("127.0.0.1:") and d["ts_ns"] > 0 for d in mine)
        assert all(bytes.fromhex(d["hex"]) for d in mine)
    assert st.bad == {"nbbo": len([d for d in dead if d["stream"] == "nbbo"]),
                      "orders": len([d for d in dead if d["stream"] == "orders"])}


def test_close_mid_frame_gives_truncated_dead_letter(server):
    good = [_tagged_nbbo(0, i) for i in range(10)]
    _send(server.ports["nbbo"], b"".join(good) + good[0][:30])
    st = server.stats()
    assert st.accepted_total == 10 and st.bad_reasons == {"truncated frame": 1}
    dead = _dead_letters(server.cfg)
    assert [(d["reason"], d["length"], d["hex"]) for d in dead] == [
        ("truncated frame", 30, good[0][:30].hex())]
    assert _log_payloads(server.cfg.log_dir) == [g[4:] for g in good]


def test_connection_reset_is_handled(server):
    good = [_tagged_order(0, i) for i in range(10)]
    s = socket.create_connection(("127.0.0.1", server.ports["orders"]))
    s.sendall(b"".join(good) + good[0][:20])
    assert wait_for(lambda: server.stats().bytes_in["orders"] == 10 * 57 + 20, 5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()                                                   # RST instead of FIN
    assert wait_for(lambda: server.stats().connections_open["orders"] == 0, 5)
    _send(server.ports["orders"], good[0])                      # still serving
    st = server.stats()
    assert st.accepted_total == 11 and st.bad_reasons == {"truncated frame": 1}
    assert _log_payloads(server.cfg.log_dir) == [g[4:] for g in good + good[:1]]


def test_large_garbage_does_not_grow_pending(server):
    rng = np.random.default_rng(3)
    junk = rng.integers(3, 256, size=3 << 20, dtype=np.uint8).tobytes()   # no 0x00: never a header
    good = [_tagged_nbbo(0, i) for i in range(5)]
    _send(server.ports["nbbo"], good[0] + junk + b"".join(good[1:]))
    st = server.stats()
    assert st.accepted_total == 5
    assert sum(d["length"] for d in _dead_letters(server.cfg)) == len(junk)
    assert _log_payloads(server.cfg.log_dir) == [g[4:] for g in good]


def test_backpressure_mutes_and_resumes(tmp_path, fixtures):
    cfg = _cfg(tmp_path, max_backlog=5000, resume_backlog=2500)
    srv = IngressServer(cfg).start()
    data = (fixtures / DEMO / "1000trades-fixish.msg").read_bytes() * 200     # 200k orders
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
    sock.connect(("127.0.0.1", srv.ports["orders"]))
    sender = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
    sender.start()
    try:
        assert wait_for(lambda: srv.stats().muted, 5)
        time.sleep(0.3)
        st = srv.stats()
        assert st.muted and st.mute_episodes == 1 and sender.is_alive()
        assert cfg.max_backlog < st.head <= cfg.max_backlog + 200 and st.backlog == st.head
        assert read_stats(cfg.log_dir)["muted"] is True

        done = threading.Event()

        def consume() -> None:       # a job that keeps up: commits whatever is durable
            while not done.is_set():
                write_consumed(cfg.log_dir, read_head(cfg.log_dir))
                time.sleep(0.002)

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        sender.join(10)
        assert not sender.is_alive()
        sock.shutdown(socket.SHUT_WR)
        assert wait_for(lambda: srv.stats().head == 200_000, 10)
        done.set()
        consumer.join()
    finally:
        sock.close()
        srv.stop()
    st = srv.stats()
    assert st.accepted_total == 200_000 and st.mute_episodes > 1 and st.muted_seconds > 0.2
    recs = LogReader(cfg.log_dir).read(0, 200_000)
    sent = np.frombuffer(data, np.uint8).reshape(-1, 57)[:, 4:]
    assert np.array_equal(recs[:, 8:8 + 53], sent)


def test_restart_continues_sequence(tmp_path, fixtures):
    cfg = _cfg(tmp_path, fsync=True)
    nbbo = (fixtures / DEMO / "1000nbbo-fixish.msg").read_bytes()
    orders = (fixtures / DEMO / "1000trades-fixish.msg").read_bytes()
    with IngressServer(cfg) as srv:
        _send(srv.ports["nbbo"], nbbo)
    assert srv.stats().head == read_head(cfg.log_dir) == 1000
    assert read_stats(cfg.log_dir)["connections_open"] == {"nbbo": 0, "orders": 0}
    with IngressServer(cfg) as srv2:
        assert srv2.stats().head == 1000
        _send(srv2.ports["orders"], orders)
    assert srv2.stats().head == 2000 and srv2.stats().accepted_total == 1000
    assert _log_payloads(cfg.log_dir) == list(iter_frames(nbbo)) + list(iter_frames(orders))


def test_port_in_use_fails_cleanly(server, tmp_path):
    cfg = Config(state_dir=tmp_path / "other", nbbo_port=server.ports["nbbo"], orders_port=0)
    with pytest.raises(OSError):
        IngressServer(cfg).start()
    _send(server.ports["nbbo"], _tagged_nbbo(0, 0))
    assert server.stats().accepted_total == 1


def test_scanner_failure_costs_the_chunk_not_the_server(server, monkeypatch):
    scan = FrameScanner.scan

    def flaky(self, buf, final=False):
        if b"BOOM" in bytes(buf):
            raise RuntimeError("boom")
        return scan(self, buf, final)

    monkeypatch.setattr(FrameScanner, "scan", flaky)
    _send(server.ports["nbbo"], b"BOOM" + _tagged_nbbo(0, 0))
    _send(server.ports["nbbo"], _tagged_nbbo(0, 1))
    st = server.stats()
    assert st.bad_reasons == {"scanner error": 1} and st.accepted_total == 1 and server.error is None
    assert _log_payloads(server.cfg.log_dir) == [_tagged_nbbo(0, 1)[4:]]


# --------------------------------------------------------------------------- honest durability

def test_disk_full_resets_the_sender_mutes_and_resumes_when_space_returns(tmp_path, caplog):
    with mounted_tmpfs(tmp_path / "disk", 4) as disk:
        cfg = Config(state_dir=disk, nbbo_port=0, orders_port=0, fsync=True, min_free_bytes=0,
                     min_free_percent=0)
        srv = IngressServer(cfg).start()
        try:
            port = srv.ports["nbbo"]
            assert send_outcome(port, b"".join(_tagged_nbbo(0, i) for i in range(100))) == "acked"
            fill(disk / "ballast")
            big = b"".join(_tagged_nbbo(1, i) for i in range(20_000))       # > the room left
            assert send_outcome(port, big) == "reset"
            st = srv.stats()
            assert srv.error is None and st.disk_full and st.muted and st.write_failures >= 1
            assert st.head == read_head(cfg.log_dir) == st.accepted_total
            seg = cfg.log_dir / "seg-00000000000000000000.log"
            assert seg.stat().st_size == st.head * 64                        # no torn tail
            assert any("disk full: " in r.getMessage() and "bytes free in" in r.getMessage()
                       for r in caplog.records)
            (disk / "ballast").unlink()
            assert wait_for(lambda: not srv.stats().muted, 5)
            assert send_outcome(port, b"".join(_tagged_nbbo(2, i) for i in range(100))) == "acked"
        finally:
            srv.stop()
        got = _log_payloads(cfg.log_dir)
        assert got[:100] == [_tagged_nbbo(0, i)[4:] for i in range(100)]
        assert got[-100:] == [_tagged_nbbo(2, i)[4:] for i in range(100)]
        assert srv.stats().accepted_total == len(got)


def test_low_space_mark_mutes_before_the_disk_is_full_and_resumes(tmp_path, caplog):
    with mounted_tmpfs(tmp_path / "disk", 8) as disk:
        cfg = Config(state_dir=disk, nbbo_port=0, orders_port=0, fsync=True, min_free_bytes=2 << 20,
                     min_free_percent=100)                                  # the mark: 2 MiB
        srv = IngressServer(cfg).start()
        try:
            assert wait_for(lambda: srv.stats().head == 0 and not srv.stats().muted, 5)
            with open(disk / "ballast", "wb") as f:                        # leave 1 MiB free
                f.write(bytes(disk_space(disk).free - (1 << 20)))
            assert wait_for(lambda: srv.stats().disk_full, 5)
            # refused while muted (a reset, never a wait that ends in "stored later")
            assert send_outcome(srv.ports["nbbo"], _tagged_nbbo(0, 0)) == "reset"
            assert srv.stats().head == 0 and srv.stats().write_failures == 0
            (disk / "ballast").unlink()
            assert wait_for(lambda: not srv.stats().muted, 5)
            assert send_outcome(srv.ports["nbbo"], _tagged_nbbo(0, 1)) == "acked" and srv.stats().head == 1
        finally:
            srv.stop()
    assert any("disk full: " in r.getMessage() and "below the low-space mark" in r.getMessage()
               for r in caplog.records)


# --------------------------------------------------------------------------- limits

def test_a_full_port_closes_its_longest_idle_sender_with_all_it_sent_stored_and_the_others_keep_flowing(tmp_path):
    srv = IngressServer(_cfg(tmp_path, max_connections=3)).start()
    port = srv.ports["orders"]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        assert wait_for(lambda: srv.stats().connections_open["orders"] == 3, 5)
        for k, s in enumerate(held):         # senders, then quiet: held[0] the longest (admission.py)
            s.sendall(_tagged_order(k, 0))
            assert wait_for(lambda: srv.stats().accepted_total == k + 1, 5)
        assert send_outcome(port, _tagged_order(9, 0)) == "acked"          # a newcomer gets in
        held[0].settimeout(5)
        assert held[0].recv(1) == b""        # a clean close: what it sent is stored
        for k, s in enumerate(held[1:], 1):  # the others still deliver and are acknowledged
            s.sendall(b"".join(_tagged_order(k, i) for i in range(1, 50)))
            s.shutdown(socket.SHUT_WR)
            s.settimeout(5)
            assert s.recv(1) == b""
        st = srv.stats()
        assert st.connections_evicted["orders"] == 1 and st.accepted_total == 4 + 2 * 49
        assert st.connections_refused["orders"] == 0
    finally:
        for s in held:
            s.close()
        srv.stop()


def test_idle_connections_are_dropped_but_muted_ones_are_not(tmp_path, fixtures):
    cfg = _cfg(tmp_path, idle_timeout=1, max_backlog=500, resume_backlog=0)
    srv = IngressServer(cfg).start()
    try:
        idle = socket.create_connection(("127.0.0.1", srv.ports["nbbo"]))
        idle.settimeout(10)
        t0 = time.monotonic()
        assert idle.recv(1) == b""           # dropped cleanly: it had sent nothing
        assert 0.9 <= time.monotonic() - t0 and srv.stats().connections_idle["nbbo"] == 1
        busy = socket.create_connection(("127.0.0.1", srv.ports["orders"]))
        busy.sendall((fixtures / DEMO / "1000trades-fixish.msg").read_bytes())   # > backlog: mutes
        assert wait_for(lambda: srv.stats().muted, 5)
        time.sleep(2.5)                      # muted for more than the idle timeout
        assert srv.stats().connections_open["orders"] == 1
        write_consumed(cfg.log_dir, 1000)
        busy.shutdown(socket.SHUT_WR)
        busy.settimeout(10)
        assert busy.recv(1) == b"" and srv.stats().accepted_total == 1000
        assert srv.stats().connections_idle["orders"] == 0
    finally:
        srv.stop()


def test_dead_letter_file_stays_under_its_cap(tmp_path):
    cfg = _cfg(tmp_path, deadletter_max_bytes=40_000)
    srv = IngressServer(cfg).start()
    goods = [_tagged_nbbo(0, i) for i in range(2000)]
    _send(srv.ports["nbbo"], b"".join(g + b"\x01" for g in goods))          # a bad byte after each
    srv.stop()
    st = srv.stats()
    rotated = Path(str(cfg.deadletter_path) + ".1")
    assert cfg.deadletter_path.stat().st_size + rotated.stat().st_size <= 40_000
    assert st.accepted_total == 2000 and st.bad_total == 2000
    assert st.deadletter_rotations >= 1 and st.deadletter_dropped > 0
    kept = len(cfg.deadletter_path.read_text().splitlines()) + len(rotated.read_text().splitlines())
    assert kept + st.deadletter_dropped == 2000


def test_housekeeping_errors_never_end_the_loop(tmp_path):
    cfg = _cfg(tmp_path)
    srv = IngressServer(cfg).start()
    try:
        (cfg.log_dir / "consumed").mkdir()   # reading it now fails on every check
        time.sleep(0.3)
        _send(srv.ports["nbbo"], _tagged_nbbo(0, 0))
        assert srv.error is None and srv.stats().accepted_total == 1
        assert wait_for(lambda: (read_stats(cfg.log_dir) or {}).get("accepted_total") == 1, 5)   # other chores go on
    finally:
        srv.stop()
