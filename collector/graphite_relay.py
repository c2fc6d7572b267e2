"""Receive Spark's GraphiteSink reports on a TCP port and hand them to a writer as `spark_executor` points.

A relay in the driver's process rather than InfluxDB's Graphite input: it works with every
InfluxDB generation (2.x and 3.x have none) and keeps the schema ours. Whoever can reach
the port can send, so every bound is the relay's own: connections, line length, idle
time; a bad sender loses its connection, never the relay's thread or the user's job.

Example::

    relay = GraphiteRelay(writer).start()                   # 127.0.0.1, a free port
    spark = SparkSession.builder.config(map=spark_metrics_conf("127.0.0.1", relay.port)).getOrCreate()
    ...
    relay.stop()
"""
from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from dataclasses import dataclass

from collector.graphite import DEFAULT_PREFIX, MAX_LINE_BYTES, ExecutorReportAssembler, parse_line

log = logging.getLogger(__name__)

_READ_BYTES = 64 * 1024
_TICK_S = 0.25


@dataclass(frozen=True)
class RelayStats:
    """What a relay did since it started.

    `dropped_connections`: senders the relay closed (idle, an over-long line, a failed
    socket); `times_full`: how often all `max_connections` were taken, new senders waiting;
    `dropped_points`: points of (app, executor) pairs beyond `max_series`.
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


class _Conn:
    """One sender's socket, its unfinished line and the report it is sending."""
    __slots__ = ("sock", "buf", "assembler", "last")

    def __init__(self, sock: socket.socket, prefix: str, now: float):
        self.sock = sock
        self.buf = bytearray()
        self.assembler = ExecutorReportAssembler(prefix, max_open=8)
        self.last = now


class GraphiteRelay:
    """A daemon thread serving Graphite plaintext on `host:port`, writing points through `writer.add`.

    `port=0` picks a free port (read `.port` after `start()`). A cluster's executors need
    the driver's reachable address as `host`; the default listens on loopback only.
    """

    def __init__(self, writer, host: str = "127.0.0.1", port: int = 0, *, prefix: str = DEFAULT_PREFIX,
                 max_connections: int = 64, idle_timeout_s: float = 30.0, quiet_s: float = 1.0,
                 max_series: int = 4096, warn_every_s: float = 60.0):
        self.writer = writer
        self.host, self.port = host, port
        self.prefix = prefix
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.quiet_s = quiet_s
        self.max_series = max_series
        self._series: set[tuple[str, str]] = set()   # a sender must not make InfluxDB series without end
        self.warn_every_s = warn_every_s
        self._counts = dict.fromkeys(("connections", "lines", "points", "bad_lines", "unknown_lines",
                                      "dropped_connections", "times_full", "dropped_points",
                                      "write_errors"), 0)
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
        return self

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
            if now - conn.last >= self.idle_timeout_s:
                self._drop(conn, "idle", f"closed a sender idle for {self.idle_timeout_s:g} s")
            else:
                self._emit(conn.assembler.drain(now, self.quiet_s))

    def _accept(self) -> None:
        """Accept what is waiting up to the bound; at the bound, stop accepting until a sender leaves.

        Senders beyond the bound wait in the kernel's backlog rather than being refused: a
        cluster's executors all report in the same second, and none of their reports is lost.
        """
        while len(self._conns) < self.max_connections:
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._warn("accept", f"accept failed: {e}")
                return
            self._counts["connections"] += 1
            sock.setblocking(False)
            conn = _Conn(sock, self.prefix, time.monotonic())
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
        self._sel.unregister(self._listener)
        self._accepting = False
        self._counts["times_full"] += 1
        self._warn("full", f"{self.max_connections} senders connected; new ones wait until one leaves")

    def _read(self, conn: _Conn) -> None:
        """Read what a sender has sent; relay its whole lines; close it at its end or on abuse."""
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
                self._line(conn, bytes(conn.buf), now)
            self._close(conn)
            return
        conn.buf += data
        start = 0
        while (end := conn.buf.find(b"\n", start)) >= 0:
            self._line(conn, bytes(conn.buf[start:end]), now)
            start = end + 1
        del conn.buf[:start]
        if len(conn.buf) > MAX_LINE_BYTES:
            self._counts["bad_lines"] += 1
            self._drop(conn, "long_line", f"closed a sender whose line exceeds {MAX_LINE_BYTES} bytes")

    def _line(self, conn: _Conn, raw: bytes, now: float) -> None:
        """Parse one line into the sender's report; a bad line is counted, never fatal."""
        if not raw.strip():
            return
        self._counts["lines"] += 1
        try:
            line = parse_line(raw)
        except ValueError as e:
            self._counts["bad_lines"] += 1
            self._warn("bad_line", f"skipped a line that is not Graphite plaintext ({e})")
            return
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
        points = kept
        if not points:
            return
        try:
            self.writer.add(points)
            self._counts["points"] += len(points)
        except Exception as e:                        # the writer is the user's; its failure is not ours to raise
            self._counts["write_errors"] += 1
            self._warn("write", f"writer refused {len(points)} points: {e!r}")

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
