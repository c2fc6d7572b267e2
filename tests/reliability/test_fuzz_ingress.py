"""Fuzz the ingress ports: random, truncated, oversized and type-confused frames mixed with good ones.

One `marketspread ingress` process takes every example over real TCP. Each connection
is acknowledged by the ingress closing it (after its group commit and the dead-letter
flush), so after each example the log and the dead-letter file can be checked exactly:
every good message logged once, in order; every bad byte dead-lettered with a reason.
Finally the real job processes the whole fuzzed log and must equal the reference.
"""
from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.wire.fixish import NBBO_LEN, NBBO_TYPE, ORDER_LEN, ORDER_TYPE, Nbbo, Order, encode_nbbo, encode_order
from engine.ingress.stats import read_stats
from engine.formats.log import LogReader, read_head

from .harness import (check_exact, drain, fleet_for, log_tail, open_fds, rss_bytes, start_ingress,
                      start_job, stop_gracefully, wait_until)

HEADER = {"nbbo": struct.pack(">IB", NBBO_LEN, NBBO_TYPE), "orders": struct.pack(">IB", ORDER_LEN, ORDER_TYPE)}
LEN = {"nbbo": NBBO_LEN, "orders": ORDER_LEN}
RSS_BOUND = 256 << 20          # the ingress holds a 4 MiB receive buffer and a few bytes per connection
_serial = itertools.count()

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
symbols = st.binary(min_size=4, max_size=4)


def _marker() -> bytes:
    """A unique transact-time field: every good message differs from every other one."""
    return f"F{next(_serial):020d}".encode()


@st.composite
def good_frames(draw, stream: str) -> bytes:
    if stream == "nbbo":
        return encode_nbbo(Nbbo(draw(symbols), _marker(), draw(finite), draw(finite)))
    return encode_order(Order(draw(st.integers(0, 255)), draw(st.integers(0, 2**32 - 1)),
                              draw(st.binary(min_size=6, max_size=6)), draw(symbols),
                              draw(finite), draw(finite), _marker()))


def bad_frames(stream: str) -> st.SearchStrategy[bytes]:
    """Bytes that are not one of this stream's frames (wrong length or type, oversized, garbage)."""
    other = "orders" if stream == "nbbo" else "nbbo"
    kind = HEADER[stream][4]
    return st.one_of(
        st.binary(min_size=1, max_size=300),                                         # random
        st.builds(lambda n, rest: struct.pack(">I", n) + rest,                       # oversized
                  st.integers(1 << 16 | 1, 2**32 - 1), st.binary(max_size=64)),
        st.builds(lambda n, rest: struct.pack(">IB", n, kind) + rest,                # wrong length
                  st.integers(0, 1 << 16).filter(lambda n: n != LEN[stream]), st.binary(max_size=80)),
        st.builds(lambda t, rest: struct.pack(">IB", LEN[stream], t) + rest,         # unknown type
                  st.integers(0, 255).filter(lambda t: t not in (NBBO_TYPE, ORDER_TYPE)),
                  st.binary(max_size=LEN[stream])),
        good_frames(other),                                                           # other stream's
    )


@dataclass
class Connection:
    stream: str
    parts: list[tuple[bool, bytes]]       # (good, bytes) in sending order
    cut: int                              # bytes of a good frame left hanging at the end (0: none)

    def payloads(self) -> list[bytes]:
        return [b[4:] for good, b in self.parts if good]

    def bad_bytes(self) -> int:
        return sum(len(b) for good, b in self.parts if not good) + self.cut

    def wire(self) -> bytes:
        tail = b""
        if self.cut:
            tail = HEADER[self.stream] + b"\x00" * (self.cut - len(HEADER[self.stream]))
        return b"".join(b for _, b in self.parts) + tail


@st.composite
def connections(draw) -> Connection:
    stream = draw(st.sampled_from(["nbbo", "orders"]))
    parts = draw(st.lists(st.one_of(good_frames(stream).map(lambda b: (True, b)),
                                    bad_frames(stream).map(lambda b: (False, b))), max_size=40))
    cut = draw(st.sampled_from([0, 0, 0, 5, LEN[stream]]))          # a frame cut short at the end
    conn = Connection(stream, parts, cut)
    # The wire must hold this stream's header exactly where the good frames (and the cut one) start;
    # a bad run that happens to contain one is indistinguishable from a good frame on any wire.
    assume(conn.wire().count(HEADER[stream]) == len(conn.payloads()) + bool(cut))
    return conn


def _send(port: int, data: bytes, splits: list[int]) -> None:
    """Send in pieces (splits frames across reads), half-close, wait for the ingress's close."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        last = 0
        for at in sorted(x for x in splits if 0 < x < len(data)) + [len(data)]:
            s.sendall(data[last:at])
            last = at
            time.sleep(0.001)
        s.shutdown(socket.SHUT_WR)
        while s.recv(4096):
            pass


class Deadletters:
    """Read the dead-letter file from where the previous read ended."""

    def __init__(self, path):
        self.path, self.offset = path, 0

    def new(self) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            raw = f.read()
        self.offset += len(raw)
        return [json.loads(line) for line in raw.decode().splitlines()]


@pytest.fixture(scope="module")
def ingress(tmp_path_factory):
    run = tmp_path_factory.mktemp("fuzz")
    fleet = fleet_for(run)
    state = run / "state"
    proc, ports = start_ingress(fleet, state, "--no-metrics")
    yield fleet, proc, ports, state
    fleet.stop_all()


def _check_connection(state, ports, dead: Deadletters, conn: Connection, splits: list[int]) -> None:
    log_dir = state / "ingress"
    h0 = read_head(log_dir)
    _send(ports[conn.stream], conn.wire(), splits)
    h1 = read_head(log_dir)
    want = conn.payloads()
    assert h1 - h0 == len(want), "good messages were lost, or bad ones logged"
    rec = LogReader(log_dir).read(h0, h1)
    assert [r[8:8 + LEN[conn.stream]].tobytes() for r in rec] == want
    letters = dead.new()
    assert sum(d["length"] for d in letters) == conn.bad_bytes(), letters
    assert all(d["reason"] and d["stream"] == conn.stream for d in letters)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.filter_too_much,
                                                                   HealthCheck.too_slow])
@given(conns=st.lists(connections(), min_size=1, max_size=3),
       splits=st.lists(st.integers(0, 3000), max_size=6))
def test_fuzzed_frames_never_cost_a_good_message_and_every_bad_byte_is_dead_lettered(ingress, conns, splits):
    _, proc, ports, state = ingress
    dead = _dead_for(state)
    for conn in conns:
        _check_connection(state, ports, dead, conn, splits)
    assert proc.alive()


_DEAD: dict = {}


def _dead_for(state) -> Deadletters:
    """One reader per ingress, kept across examples (the file only grows)."""
    if state not in _DEAD:
        _DEAD[state] = Deadletters(state / "ingress" / "deadletter.jsonl")
        _DEAD[state].new()
    return _DEAD[state]


def test_huge_garbage_and_oversized_lengths_keep_memory_bounded(ingress):
    """64 MiB of garbage and 4 GiB length claims between good frames: RSS stays bounded."""
    _, proc, ports, state = ingress
    dead = _dead_for(state)
    rng = np.random.default_rng(5)
    garbage = bytearray(rng.integers(0, 256, 16 << 20, dtype=np.uint8).tobytes())
    for h in HEADER.values():                      # no accidental header inside the garbage
        while (i := garbage.find(h)) >= 0:
            garbage[i] ^= 0xFF
    parts = []
    for k in range(4):
        parts += [(True, encode_order(Order(1, k, b"BIGGAR", b"AAPL", 1.0, 2.0, _marker()))),
                  (False, struct.pack(">IB", 0xFFFFFFF0, ORDER_TYPE) + b"x" * 100),
                  (False, bytes(garbage))]
    parts.append((True, encode_order(Order(2, 9, b"BIGEND", b"AAPL", 1.0, 2.0, _marker()))))
    peak = [rss_bytes(proc.popen.pid)]
    done = threading.Event()

    def watch():
        while not done.wait(0.02):
            peak.append(rss_bytes(proc.popen.pid))
    t = threading.Thread(target=watch)
    t.start()
    try:
        _check_connection(state, ports, dead, Connection("orders", parts, 0), [])
    finally:
        done.set()
        t.join()
    print(f"\nFIGURES fuzz: ingress RSS before {peak[0] / 2**20:.1f} MiB, peak while taking 64 MiB of "
          f"garbage {max(peak) / 2**20:.1f} MiB")
    assert max(peak) < RSS_BOUND


def test_after_fuzzing_counters_match_the_dead_letters_and_the_job_equals_the_reference(ingress):
    fleet, proc, ports, state = ingress
    log_dir = state / "ingress"
    baseline_fds = open_fds(proc.popen.pid)
    wait_until(lambda: (read_stats(log_dir) or {}).get("connections_open") == {"nbbo": 0, "orders": 0},
               10, "all connections closed", [proc])
    assert open_fds(proc.popen.pid) <= baseline_fds             # no descriptor left behind
    lines = (log_dir / "deadletter.jsonl").read_text().splitlines()
    wait_until(lambda: read_stats(log_dir)["bad_total"] == len(lines), 10, "stats.json to catch up", [proc])
    st_ = read_stats(log_dir)
    assert st_["accepted_total"] == read_head(log_dir) > 0
    assert sum(st_["bad_reasons"].values()) == st_["bad_total"] == len(lines) > 0
    assert rss_bytes(proc.popen.pid) < RSS_BOUND
    print(f"\nFIGURES fuzz: {st_['accepted_total']} good messages logged, {st_['bad_total']} bad runs "
          f"dead-lettered {st_['bad_reasons']}, {sum(st_['connections_total'].values())} connections")
    assert stop_gracefully(fleet, proc, 30) == 0, log_tail(proc.log_path)
    job = start_job(fleet, state, "--no-metrics")
    try:
        drain(state, job, 180)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
    finally:
        fleet.stop_all()
    ex = check_exact(state)
    assert ex.exact, ex
