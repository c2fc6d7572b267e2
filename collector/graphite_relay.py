"""Receive Spark's GraphiteSink reports on a TCP port and hand them to a writer as `spark_executor` points.

A relay in the driver's process rather than InfluxDB's Graphite input: it works with every
InfluxDB generation (2.x and 3.x have none) and keeps the schema ours. Spark's sink has no
authentication and whoever can reach the port can send, so the relay defends itself:

- each relay has its own secret metrics prefix (`relay.prefix`, given to Spark in the sink's
  properties): a connection whose bytes do not start every line with it (an HTTP request
  from a web page, a guess at a plausible name) is closed at once and nothing of it is
  relayed, before it counts towards any bound;
- a timestamp more than `max_skew_s` (5 min) from the relay's clock is refused, so no
  sender can make InfluxDB open shards for other days;
- at most `series_burst` points per (app, executor) at once, refilled at `series_rate_per_s`,
  and at most `max_lines_per_s` lines in all: beyond that the relay stops reading until the
  next second (senders wait in TCP; nothing of theirs is lost, and no flood takes a core);
- connections, line length, idle time are bounded; when every place is taken, a sender
  that has not sent a line of the session for `hello_s` gives way to a new one.

A bad sender loses its connection, never the relay's thread or the user's job.

Example::

    relay = GraphiteRelay(writer).start()                   # 127.0.0.1, a free port
    spark = SparkSession.builder.config(map=relay.spark_conf()).getOrCreate()
    ...
    relay.stop()
"""
from __future__ import annotations

import logging
import ipaddress
import secrets
import selectors
import socket
import threading
import time
from dataclasses import dataclass

from collector.graphite import DEFAULT_PREFIX, MAX_LINE_BYTES, ExecutorReportAssembler, parse_line, spark_metrics_conf

log = logging.getLogger(__name__)

_READ_BYTES = 64 * 1024
_TICK_S = 0.25


def session_prefix() -> str:
    """Return a new secret metrics prefix: 128 random bits no other sender can guess.

    The word `token` in it makes Spark redact the value where it shows its configuration
    (the UI's environment page, event logs: `spark.redaction.regex`).
    """
    return f"{DEFAULT_PREFIX}-token-{secrets.token_hex(16)}"


def is_loopback(host: str) -> bool:
    """Return whether `host` is a loopback address or `localhost`."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class RelayStats:
    """What a relay did since it started.

    `dropped_connections`: senders the relay closed (idle, an over-long line, a failed
    socket); `times_full`: how often all `max_connections` were taken, new senders waiting;
    `dropped_points`: points of (app, executor) pairs beyond `max_series`; `foreign_connections`:
    senders closed for bytes without the session's prefix (`http_connections` of them began
    like an HTTP request); `skewed_lines`: lines dated beyond `max_skew_s`; `rate_limited_points`:
    points beyond a series' rate; `paused`: seconds in which `max_lines_per_s` was reached;
    `evicted_connections`: senders without a session line that gave way to a new one.
    """
    connections: int
    open_connections: int
    lines: int
    points: int
    bad_lines: int
    unknown_lines: int
    dropped_connections: int
    times_full: int
    dropped_points: int
    write_errors: int
    foreign_connections: int = 0
    http_connections: int = 0
    skewed_lines: int = 0
    rate_limited_points: int = 0
    paused: int = 0
    evicted_connections: int = 0


_COUNTERS = ("connections", "lines", "points", "bad_lines", "unknown_lines", "dropped_connections", "times_full",
             "dropped_points", "write_errors", "foreign_connections", "http_connections", "skewed_lines",
             "rate_limited_points", "paused", "evicted_connections")
#: First bytes of an HTTP request (a web page's cross-origin fetch is one): closed at once.
_HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"OPTIONS ", b"HEAD ", b"DELETE ", b"PATCH ", b"CONNECT ",
                 b"TRACE ", b"PRI ")


class _Conn:
    """One sender's socket, its unfinished line, the report it is sending, whether it sent a session line."""
    __slots__ = ("sock", "buf", "assembler", "last", "trusted")

    def __init__(self, sock: socket.socket, prefix: str, now: float):
        self.sock = sock
        self.buf = bytearray()
        self.assembler = ExecutorReportAssembler(prefix, max_open=8)
        self.last = now
        self.trusted = False


class GraphiteRelay:
    """A daemon thread serving Graphite plaintext on `host:port`, writing points through `writer.add`.

    `port=0` picks a free port (read `.port` after `start()`). A cluster's executors need
    the driver's reachable address as `host`; the default listens on loopback only, and a
    wider bind is logged in one warning line. `prefix` (default: a new secret one) is what
    every line of the session's Spark starts with; give Spark `spark_conf()`.
    """

    def __init__(self, writer, host: str = "127.0.0.1", port: int = 0, *, prefix: str | None = None,
                 max_connections: int = 64, idle_timeout_s: float = 30.0, quiet_s: float = 1.0,
                 max_series: int = 4096, warn_every_s: float = 60.0, max_skew_s: float = 300.0,
                 series_rate_per_s: float = 1.0, series_burst: int = 5, max_lines_per_s: int = 5000,
                 hello_s: float = 0.5, clock=time.time):
        self.writer = writer
        self.host, self.port = host, port
        self.prefix = prefix if prefix is not None else session_prefix()
        self._expect = (self.prefix + ".").encode("ascii")
        self.max_skew_s = max_skew_s
        self.series_rate_per_s, self.series_burst = series_rate_per_s, series_burst
        self._tokens: dict[tuple[str, str], tuple[float, float]] = {}   # series -> (tokens, when)
        self.max_lines_per_s = max_lines_per_s
        self._window = (0.0, 0)                                          # (second started, lines read in it)
        self.hello_s = hello_s
        self._clock = clock
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.quiet_s = quiet_s
        self.max_series = max_series
        self._series: set[tuple[str, str]] = set()   # a sender must not make InfluxDB series without end
        self.warn_every_s = warn_every_s
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._conns: dict[int, _Conn] = {}
        self._warned: dict[str, float] = {}
        self._accepting = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None

    # -- lifecycle

    def start(self) -> GraphiteRelay:
        """Bind and start serving; raise OSError if the address cannot be bound."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        listener = socket.create_server((self.host, self.port), family=family, backlog=1024)
        listener.setblocking(False)
        self._listener, self.port = listener, listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(listener, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name=f"graphite-relay-{self.port}", daemon=True)
        self._thread.start()
        log.info("graphite relay: listening on %s:%d for Spark's metrics sink", self.host, self.port)
        if not is_loopback(self.host):
            log.warning("graphite relay: listening on %s:%d beyond loopback: anyone who reaches it can connect; "
                        "only lines with this session's secret prefix are relayed", self.host, self.port)
        return self

    def spark_conf(self, host: str | None = None, period_s: int = 2) -> dict[str, str]:
        """Return the Spark properties that send this session's metrics here, with the relay's prefix.

        `host`: the address Spark sends to (default: the bound one; a wildcard bind needs the
        driver's reachable address).
        """
        return spark_metrics_conf(host or self.host, self.port, period_s, self.prefix)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving, hand on the reports still open, close every socket."""
        if self._thread is None:
            return
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> GraphiteRelay:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stats(self) -> RelayStats:
        """Return the counters (read without a lock: each is written by the relay's thread only)."""
        return RelayStats(open_connections=len(self._conns), **self._counts)

    # -- the thread

    def _run(self) -> None:
        """Serve until stopped; nothing raises out of here."""
        try:
            while not self._stop.is_set():
                try:
                    self._turn()
                except Exception as e:                # a bug must not end the relay: count, warn, go on
                    self._warn("loop", f"unexpected error, going on: {e!r}")
                    time.sleep(_TICK_S)
        finally:
            self._shutdown()

    def _turn(self) -> None:
        """Serve one turn: accept, read, close idle senders, hand on quiet reports."""
        started, lines = self._window
        if lines >= self.max_lines_per_s and time.monotonic() - started < 1.0:
            self._counts["paused"] += 1
            self._warn("rate", f"more than {self.max_lines_per_s} lines a second; reading paused until the next")
            self._stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))
        for key, _ in self._sel.select(_TICK_S):
            if key.data == "accept":
                self._accept()
            elif key.data == "wake":
                try:
                    self._wake_r.recv(64)
                except OSError:
                    pass
            else:
                self._read(key.data)
        now = time.monotonic()
        for conn in list(self._conns.values()):
            if not self._accepting and not conn.trusted and now - conn.last >= self.hello_s \
                    and not _has_unread(conn.sock):
                self._counts["evicted_connections"] += 1
                self._drop(conn, "evict", "closed a silent sender to make room for a new one")
            elif now - conn.last >= self.idle_timeout_s:
                self._drop(conn, "idle", f"closed a sender idle for {self.idle_timeout_s:g} s")
            else:
                self._emit(conn.assembler.drain(now, self.quiet_s))

    def _accept(self) -> None:
        """Accept what is waiting up to the bound; at the bound, stop accepting until a sender leaves.

        Senders beyond the bound wait in the kernel's backlog rather than being refused: a
        cluster's executors all report in the same second, and none of their reports is lost.
        """
        while len(self._conns) < self.max_connections or self._evict_one():
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._warn("accept", f"accept failed: {e}")
                return
            self._counts["connections"] += 1
            self._spend(time.monotonic())
            sock.setblocking(False)
            conn = _Conn(sock, self.prefix, time.monotonic())
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
        self._sel.unregister(self._listener)
        self._accepting = False
        self._counts["times_full"] += 1
        self._warn("full", f"{self.max_connections} senders connected; new ones wait until one leaves")

    def _evict_one(self) -> bool:
        """Close the longest-idle sender that sent no session line for `hello_s`; False if there is none.

        Spark's sink sends as soon as it connects, so such a sender only holds a place a
        real report may need: a flood of idle sockets cannot keep the session's Spark out.
        """
        now = time.monotonic()
        idle = [c for c in self._conns.values()
                if not c.trusted and now - c.last >= self.hello_s and not _has_unread(c.sock)]
        if not idle:
            return False
        self._counts["evicted_connections"] += 1
        self._drop(min(idle, key=lambda c: c.last), "evict", "closed a silent sender to make room for a new one")
        return True

    def _read(self, conn: _Conn) -> None:
        """Read what a sender has sent; relay its whole lines; close it at its end or on abuse."""
        if conn.sock.fileno() < 0:                    # closed earlier in this turn (made room for another)
            return
        try:
            data = conn.sock.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._drop(conn, "reset", f"a sender's connection failed: {e}")
            return
        now = time.monotonic()
        conn.last = now
        if not data:
            if conn.buf:                              # a last line without newline still counts
                if not conn.buf.startswith(self._expect):
                    self._foreign(conn, bytes(conn.buf))
                    return
                self._line(conn, bytes(conn.buf), now)
            self._close(conn)
            return
        if not conn.trusted and not conn.buf and self._foreign(conn, data):
            return
        conn.buf += data
        start = 0
        while (end := conn.buf.find(b"\n", start)) >= 0:
            raw = bytes(conn.buf[start:end])
            start = end + 1
            if raw.strip() and not raw.startswith(self._expect):
                self._foreign(conn, raw)
                return
            self._line(conn, raw, now)
        del conn.buf[:start]
        if len(conn.buf) > MAX_LINE_BYTES:
            self._counts["bad_lines"] += 1
            self._drop(conn, "long_line", f"closed a sender whose line exceeds {MAX_LINE_BYTES} bytes")

    def _foreign(self, conn: _Conn, data: bytes) -> bool:
        """Close a sender whose bytes are not the session's lines (nothing it sent is relayed); False if they may be."""
        n = min(len(data), len(self._expect))
        if data[:n] == self._expect[:n]:
            return False
        http = data.startswith(_HTTP_METHODS)
        self._counts["foreign_connections"] += 1
        self._counts["http_connections"] += http
        conn.assembler = ExecutorReportAssembler(self.prefix, max_open=1)       # nothing of it is handed on
        self._drop(conn, "foreign", "closed a sender that is not this session's Spark"
                   + (" (an HTTP request)" if http else " (lines without the session's prefix)"))
        return True

    def _line(self, conn: _Conn, raw: bytes, now: float) -> None:
        """Parse one line into the sender's report; a bad or skewed line is counted, never fatal."""
        if not raw.strip():
            return
        self._counts["lines"] += 1
        self._spend(now)
        try:
            line = parse_line(raw)
        except ValueError as e:
            self._counts["bad_lines"] += 1
            self._warn("bad_line", f"skipped a line that is not Graphite plaintext ({e})")
            return
        if abs(line.ts_s - self._clock()) > self.max_skew_s:
            self._counts["skewed_lines"] += 1
            self._warn("skew", f"skipped a line dated {line.ts_s}, more than {self.max_skew_s:g} s from this clock")
            return
        conn.trusted = True
        before = conn.assembler.unknown
        self._emit(conn.assembler.add(line, now))
        self._counts["unknown_lines"] += conn.assembler.unknown - before

    def _emit(self, points) -> None:
        """Hand points to the writer; a failing writer is counted, never raised."""
        if len(self._series) < self.max_series:
            self._series.update((p.tags["app"], p.tags["executor"]) for p in points)
        kept = [p for p in points if (p.tags["app"], p.tags["executor"]) in self._series]
        self._counts["dropped_points"] += len(points) - len(kept)
        if len(kept) < len(points):
            self._warn("series", f"ignored points of new executors: {self.max_series} (app, executor) pairs seen")
        points = [p for p in kept if self._take_token((p.tags["app"], p.tags["executor"]))]
        if len(points) < len(kept):
            self._counts["rate_limited_points"] += len(kept) - len(points)
            self._warn("series_rate", f"ignored points beyond {self.series_rate_per_s:g} a second of one executor")
        if not points:
            return
        try:
            self.writer.add(points)
            self._counts["points"] += len(points)
        except Exception as e:                        # the writer is the user's; its failure is not ours to raise
            self._counts["write_errors"] += 1
            self._warn("write", f"writer refused {len(points)} points: {e!r}")

    def _spend(self, now: float) -> None:
        """Count a line or a connection against this second's `max_lines_per_s`."""
        started, spent = self._window
        self._window = (started, spent + 1) if now - started < 1.0 else (now, 1)

    def _take_token(self, series: tuple[str, str]) -> bool:
        """Spend one of a series' points (a token bucket of `series_burst`, refilled at `series_rate_per_s`)."""
        now = time.monotonic()
        tokens, when = self._tokens.get(series, (float(self.series_burst), now))
        tokens = min(float(self.series_burst), tokens + (now - when) * self.series_rate_per_s)
        if tokens < 1.0:
            self._tokens[series] = (tokens, now)
            return False
        self._tokens[series] = (tokens - 1.0, now)
        return True

    def _close(self, conn: _Conn) -> None:
        """Close a sender's connection after handing on its report (Spark ends each report so)."""
        self._emit(conn.assembler.end_of_report())
        self._conns.pop(conn.sock.fileno(), None)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        if not self._accepting and len(self._conns) < self.max_connections:
            self._sel.register(self._listener, selectors.EVENT_READ, "accept")
            self._accepting = True

    def _drop(self, conn: _Conn, kind: str, message: str) -> None:
        self._counts["dropped_connections"] += 1
        self._warn(kind, message)
        self._close(conn)

    def _warn(self, kind: str, message: str) -> None:
        """Log one warning line per kind of problem at most every `warn_every_s`."""
        now = time.monotonic()
        if now - self._warned.get(kind, -self.warn_every_s) >= self.warn_every_s:
            self._warned[kind] = now
            log.warning("graphite relay on port %d: %s (further ones counted in stats())", self.port, message)

    def _shutdown(self) -> None:
        for conn in list(self._conns.values()):
            try:
                self._close(conn)
            except Exception:                         # closing is best effort at shutdown
                pass
        for s in (self._listener, self._wake_r, self._wake_w):
            try:
                s.close()
            except OSError:
                pass
        self._sel.close()


def _has_unread(sock: socket.socket) -> bool:
    """Return whether a sender has bytes the relay has not read yet (or has closed): not silent.

    While reading is paused at the overall rate, a sender's report waits in the kernel;
    its place must not go to a newcomer as if it had said nothing.
    """
    try:
        sock.recv(1, socket.MSG_PEEK)               # bytes waiting, or the sender's end
        return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True                             # failed: its read drops it, not an eviction
