"""The long-running ingress: Wallaroo's two TCP sources, writing one durable log.

One thread runs a `selectors` loop over two listening ports (NBBO, orders) and any
number of sender connections. Bytes are received straight into one large buffer, split
by the connection's vectorised `FrameScanner`, and appended to the single `LogWriter`,
so the log order is the arrival order across both ports. Each loop iteration ends with
one group commit (one fsync however many messages it took in).

Bad input never stops a connection: it is counted and written to a dead-letter file.
Like Wallaroo muting its sources, the loop stops reading every socket while the job is
more than `max_backlog` records behind, and TCP flow control pushes back on senders.

A connection is closed only after the iteration that read its end-of-stream committed,
so a sender that sees the server close its side knows all it sent is durable. When a
write or fsync of the log fails (disk full, I/O error), the records of that commit are
truncated away, every connection that had bytes in them is reset (RST, never a clean
close), and the loop mutes all sockets, logs "disk full: N bytes free in ...", and
resumes by itself once space is back; a periodic `statvfs` mutes it before the disk is
full; while muted for the disk, connections are reset and new ones refused. Connection
limits (per port, per client, first frame, idle) are admission.py's, and no error of the
loop's own housekeeping (a full disk, no file descriptors) ends it.

Example::

    server = IngressServer(cfg)
    server.start()                  # listening on server.ports["nbbo"], ["orders"]
    ...
    server.stop()
    print(server.stats().accepted_total)
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
import struct
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from engine.config import Config
from engine.ingress.admission import Admission, connection_cap
from engine.ingress.connection import SenderConnection
from engine.ingress.connlog import ConnectionSummary
from engine.ingress.foreign import LONGEST, UNDECIDED, foreign_protocol
from engine.ingress.deadletter import DeadLetter, DeadLetterFile
from engine.storage.diskspace import SpaceMark, describe_free, disk_space
from engine.wire.fixish import STREAM_NBBO, STREAM_ORDERS, BadFrame, FrameScanner, ScanResult
from engine.formats.log import LogWriter, read_consumed
from engine.formats.shard_files import ShardFileWriter
from engine.ingress.stats import STATS_FILE, IngressCounters, IngressStats, reason_category, write_stats

log = logging.getLogger(__name__)

STREAMS = (STREAM_NBBO, STREAM_ORDERS)
RECV_BUFFER = 4 << 20            # one shared receive buffer; a whole read is scanned at once
MAX_PENDING = 1 << 20            # bound on one connection's undecided bytes
MIN_READ = 4096                  # smallest read while close to the backlog bound
BACKPRESSURE_INTERVAL = 0.010    # how often `consumed` is re-read
STATS_INTERVAL = 0.100           # least time between two writes of stats.json
DISK_CHECK_INTERVAL = 0.250      # how often free space is read (one statvfs)
IDLE_CHECK_INTERVAL = 1.0        # how often silent connections are looked for
ACCEPT_PAUSE = 0.100             # accepting rests this long when the process is out of descriptors
LOG_EVERY = 5.0                  # least seconds between two lines of one repeated warning
_RST = struct.pack("ii", 1, 0)   # SO_LINGER on, 0 s: close() resets the connection


@dataclass(frozen=True)
class _Listener:
    stream: str


class IngressServer:
    """Accept fixish messages on the NBBO and orders ports into the ingress log.

    `start()` serves from a daemon thread, `serve_forever()` from the calling one;
    `stop()` from any thread ends the loop and waits for a clean shutdown.
    """

    def __init__(self, cfg: Config, on_commit=None):
        """`on_commit(commit_ns, [(stream, ingest_ns, n), ...])` is called after each group
        commit with what it made durable (the `ingress` latency step); it must not block."""
        self.cfg = cfg
        self.on_commit = on_commit
        self._appended: list[tuple[str, int, int]] = []
        self.ports: dict[str, int] = {}
        self.error: BaseException | None = None
        self._sel: selectors.BaseSelector | None = None
        self._listeners: list[socket.socket] = []
        self._conns: set[SenderConnection] = set()
        self._writer: LogWriter | None = None
        self._shard_files: ShardFileWriter | None = None     # with cfg.shards > 1 (shard_files.py)
        self._dead: DeadLetterFile | None = None
        self._touched: list[SenderConnection] = []          # connections with records since the last commit
        self._why_muted: set[str] = set()        # "backlog", "disk"
        self._disk_failed = False                # a write failed: resume needs more room
        self._space = SpaceMark(cfg.min_free_bytes, cfg.min_free_percent)
        self._max_conns = cfg.max_connections
        self._admit = Admission(cfg.max_connections, cfg.max_connections_per_client, cfg.first_frame_timeout,
                                cfg.idle_timeout)
        self._unpolled: list[SenderConnection] = []   # registered since the last select
        self._summary = ConnectionSummary()
        self._paused: list[tuple[socket.socket, str]] = []
        self._accept_resume = 0.0
        self._last_log: dict[str, float] = {}
        self._buf = bytearray(RECV_BUFFER)
        self._mv = memoryview(self._buf)
        self._lock = threading.Lock()
        self._c = IngressCounters(STREAMS)
        self._consumed = 0
        self._muted = False
        self._muted_since = 0.0
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._loop_ident: int | None = None
        self._thread: threading.Thread | None = None
        self._last_stats: dict | None = None

    # ------------------------------------------------------------------ lifecycle

    def _bind(self) -> None:
        if self._sel is not None:
            return
        cfg = self.cfg
        sel = selectors.DefaultSelector()
        try:
            for stream, port in ((STREAM_NBBO, cfg.nbbo_port), (STREAM_ORDERS, cfg.orders_port)):
                ls = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET, socket.SOCK_STREAM)
                self._listeners.append(ls)
                ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                ls.bind((cfg.host, port))
                ls.listen(128)
                ls.setblocking(False)
                sel.register(ls, selectors.EVENT_READ, _Listener(stream))
                self.ports[stream] = ls.getsockname()[1]
            self._writer = LogWriter(cfg.log_dir, fsync=cfg.fsync)
            self._consumed = read_consumed(cfg.log_dir)
            self._shard_files = ShardFileWriter.open(self._writer, cfg.shards, self._consumed)
            self._dead = DeadLetterFile(cfg.deadletter_path, cfg.deadletter_max_bytes)
            self._admit.max_connections = self._max_conns = connection_cap(cfg.max_connections)
        except BaseException:       # e.g. a port in use: release what was opened
            for ls in self._listeners:
                ls.close()
            self._listeners.clear()
            sel.close()
            if self._writer is not None:
                self._writer.close()
                self._writer = None
            raise
        self._sel = sel
        log.info("ingress listening on %s: nbbo %d, orders %d; log %s at head %d (fsync %s); "
                 "up to %d connections per port, idle timeout %d s, dead letters up to %d bytes",
                 cfg.host, self.ports[STREAM_NBBO], self.ports[STREAM_ORDERS], cfg.log_dir,
                 self._writer.head, "on" if cfg.fsync else "off", self._max_conns, cfg.idle_timeout,
                 cfg.deadletter_max_bytes)

    def start(self) -> "IngressServer":
        """Bind both ports, then serve from a daemon thread; return once listening."""
        self._bind()
        self._thread = threading.Thread(target=self._serve_in_thread, name="ingress", daemon=True)
        self._thread.start()
        return self

    def _serve_in_thread(self) -> None:
        try:
            self.serve_forever()
        except BaseException:       # already logged and kept in self.error
            pass

    def serve_forever(self) -> None:
        """Serve in the calling thread until `stop()`."""
        self._bind()
        self._loop_ident = threading.get_ident()
        try:
            self._loop()
        except BaseException as e:
            self.error = e
            log.exception("ingress loop failed")
            raise
        finally:
            try:
                self._shutdown()
            finally:
                self._done.set()

    def stop(self) -> None:
        """End the loop: scan final tails, commit, close the log and sockets, write stats."""
        self._stopping.set()
        if self._loop_ident is None and self._thread is None:
            if self._sel is not None and not self._done.is_set():   # bound but never served
                self._shutdown()
                self._done.set()
            return
        if threading.get_ident() != self._loop_ident:
            self._done.wait()

    def __enter__(self) -> "IngressServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ loop

    def _loop(self) -> None:
        next_check = next_stats = next_disk = next_idle = 0.0
        while not self._stopping.is_set():
            events = self._sel.select(BACKPRESSURE_INTERVAL)
            polled, self._unpolled = self._unpolled, []
            closing: list[SenderConnection] = []
            # reads before accepts: a connection that had bytes is read before a newcomer may
            # need its place (admission.py: only a connection looked at gives way)
            for key, _ in sorted(events, key=lambda e: isinstance(e[0].data, _Listener)):
                if isinstance(key.data, _Listener):
                    for conn in polled:
                        conn.polled = conn.registered
                    polled = []
                    self._accept(key.fileobj, key.data.stream)
                elif not self._muted and not key.data.closed:
                    try:
                        eof = self._read(key.data)
                    except OSError as e:     # the log write failed: nothing of this commit is stored
                        self._write_failed(e, key.data)
                        continue
                    if eof:
                        closing.append(key.data)
            self._commit()
            for conn in closing:     # after the commit: a sender seeing our close is durable
                if not conn.closed:
                    self._close(conn)
            now = time.monotonic()   # housekeeping: each chore's error costs that chore, never the loop
            if now >= next_check:
                next_check = now + BACKPRESSURE_INTERVAL
                self._chore("backpressure", self._check_backpressure)
            if now >= next_disk:
                next_disk = now + DISK_CHECK_INTERVAL
                self._chore("disk", self._check_disk)
            if now >= next_idle:
                next_idle = now + IDLE_CHECK_INTERVAL
                self._chore("idle", lambda: self._drop_idle(now))
            if self._paused and now >= self._accept_resume:
                self._chore("accept", self._resume_accepting)
            if closing or now >= next_stats:
                next_stats = now + STATS_INTERVAL
                self._chore("stats", self._write_stats)
                self._log_summary(now)
            for conn in polled:
                conn.polled = conn.registered

    def _chore(self, name: str, fn) -> None:
        try:
            fn()
        except OSError as e:     # a full disk, no descriptors, a file made unreadable
            self._warn(name, "ingress %s check failed (carrying on): %s", name, e)

    def _commit(self) -> None:
        """Make this iteration's records durable and publish them, or roll them back."""
        if not self._touched:
            return
        try:
            self._writer.commit()
        except OSError as e:
            self._write_failed(e)
            return
        for conn in self._touched:
            conn.uncommitted = 0
        self._touched.clear()
        if self.on_commit is not None and self._appended:
            self.on_commit(time.time_ns(), self._appended)
        self._appended = []

    def _write_failed(self, err: OSError, culprit: SenderConnection | None = None) -> None:
        """Truncate the log to the last commit, reset every connection with bytes in the lost tail, mute."""
        lost = self._writer.size - self._writer.head
        try:
            self._writer.rollback()
        except OSError as e:     # retried before the next append (see _check_disk)
            log.error("ingress could not truncate the log back to %d: %s", self._writer.head, e)
        victims = list(self._touched)
        if culprit is not None and culprit not in victims:
            victims.append(culprit)
        with self._lock:
            self._c.write_failures += 1
            self._c.records_rolled_back += lost
            for conn in victims:
                self._c.accepted[conn.stream] -= conn.uncommitted
        self._disk_failed = True
        what = "disk full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "disk error"
        log.error("%s: %s (log write failed: %s); %d records not stored were truncated away, "
                  "%d connections reset; ingress muted until space returns", what,
                  describe_free(self.cfg.log_dir), err.strerror or err, lost, len(victims))
        self._mute("disk")           # all of this before the resets: a sender seeing one sees it done
        for conn in victims:
            conn.accepted -= conn.uncommitted
            conn.uncommitted = 0
            if not conn.closed:
                self._close(conn, reset=True)
        self._touched.clear()
        self._appended = []

    def _accept(self, ls: socket.socket, stream: str) -> None:
        while True:
            try:
                sock, addr = ls.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:     # e.g. out of file descriptors: rest, then retry
                self._warn("accept", "accept on %s port failed (pausing %.1f s): %s", stream, ACCEPT_PAUSE, e)
                self._pause_accepting()
                return
            # muted for disk space: refused, so a sender never waits for a "stored later"
            client, evict = (None, None) if "disk" in self._why_muted else self._admit.admit(stream, addr[0])
            if evict is not None:            # a full share or port: the longest-idle connection gives way
                self._close(evict, reset=bool(evict.pending) or not evict.accepted, evicted=True)
            if client is None:
                self._refuse(sock, stream, addr)
                continue
            sock.setblocking(False)
            now = time.monotonic()
            conn = SenderConnection(sock, stream, f"{addr[0]}:{addr[1]}", FrameScanner(stream), last_active=now,
                         opened=now, client=client)
            self._conns.add(conn)
            self._admit.track(conn)
            if not self._muted:
                self._register(conn)
            with self._lock:
                self._c.connections_open[stream] += 1
                self._c.connections_total[stream] += 1
            log.debug("%s connection from %s", stream, conn.peer)

    def _refuse(self, sock: socket.socket, stream: str, addr) -> None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
        except OSError:
            pass
        sock.close()
        with self._lock:
            self._c.connections_refused[stream] += 1
        self._warn("refuse-" + stream, "%s port refused %s:%s (%d refused so far): %s", stream, addr[0], addr[1],
                   self._c.connections_refused[stream], "disk space low" if "disk" in self._why_muted else
                   "full (--max-connections) or its client's share taken (MS_MAX_CONNECTIONS_PER_CLIENT), "
                   "and no connection there may give way yet")

    def _pause_accepting(self) -> None:
        for key in list(self._sel.get_map().values()):
            if isinstance(key.data, _Listener):
                self._sel.unregister(key.fileobj)
                self._paused.append((key.fileobj, key.data.stream))
        self._accept_resume = time.monotonic() + ACCEPT_PAUSE

    def _resume_accepting(self) -> None:
        for ls, stream in self._paused:
            self._sel.register(ls, selectors.EVENT_READ, _Listener(stream))
        self._paused.clear()

    def _drop_idle(self, now: float) -> None:
        """Close connections silent too long or without a frame in time (muted time never counts)."""
        if self._muted:
            return
        for conn, why in self._admit.expired(list(self._conns), now):
            pending = bool(conn.pending)
            if pending:              # a frame it began and never finished: set it aside
                res = conn.scanner.scan(conn.pending, final=True)
                self._dead_letter(conn, list(res.bad))
                conn.pending = b""
            with self._lock:
                self._c.connections_idle[conn.stream] += 1
            log.debug("%s connection from %s %s: dropped", conn.stream, conn.peer, why)
            self._close(conn, reset=pending)

    def _warn(self, key: str, msg: str, *args) -> None:
        """Log a warning at most once per `LOG_EVERY` seconds per `key` (floods stay one line)."""
        now = time.monotonic()
        if now - self._last_log.get(key, -LOG_EVERY) >= LOG_EVERY:
            self._last_log[key] = now
            log.warning(msg, *args)

    def _read(self, conn: SenderConnection) -> bool:
        """Receive what a connection has (bounded by the backlog room), append it; return eof.

        Raises OSError when the log write fails (the caller rolls back and resets)."""
        mv, p = self._mv, len(conn.pending)
        mv[:p] = conn.pending
        room = self.cfg.max_backlog - (self._writer.size - self._consumed)
        budget = min(len(mv) - p, max(MIN_READ, room * conn.scanner.frame_len))
        end, eof, ts = p, False, 0
        while end < p + budget:
            try:
                n = conn.sock.recv_into(mv[end:p + budget])
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:     # reset by peer and the like: what arrived still counts
                log.debug("%s connection from %s failed: %s", conn.stream, conn.peer, e)
                eof = True
                break
            if n == 0:
                eof = True
                break
            if not ts:
                ts = time.time_ns()
            end += n
        if end == p and not eof:
            return False
        if not conn.sniffed and end > p:
            what = foreign_protocol(bytes(mv[:min(end, LONGEST)]))
            if what == UNDECIDED and not eof:
                conn.pending = bytes(mv[:end])       # fewer bytes than decide: wait for more
                return False
            if what not in (None, UNDECIDED):
                self._foreign(conn, what)
                return False
            conn.sniffed = True
        conn.last_active = time.monotonic()
        self._admit.active(conn)
        try:
            res = conn.scanner.scan(mv[:end], final=eof)
        except Exception as e:       # a scanner bug must cost this chunk, not the server
            log.exception("%s scanner failed on %d bytes from %s", conn.stream, end, conn.peer)
            res = ScanResult(np.empty((0, conn.scanner.payload_len), np.uint8),
                             [BadFrame(f"scanner error: {e!r}", bytes(mv[:end]))], end)
        bad = list(res.bad)
        rest = end - res.consumed
        if rest > MAX_PENDING:       # the scanner never keeps this much; bound it anyway
            bad.append(BadFrame("pending overflow", bytes(mv[res.consumed:end])))
            rest = 0
        conn.pending = bytes(mv[end - rest:end]) if rest else b""
        n_good = len(res.payloads)
        if n_good:
            ts = ts or time.time_ns()
            self._writer.append(res.payloads, ts)
            if not conn.uncommitted:
                self._touched.append(conn)
            conn.uncommitted += n_good
            if self.on_commit is not None:
                self._appended.append((conn.stream, ts, n_good))
        if n_good and not conn.accepted:
            self._admit.framed(conn)     # a real sender now: never the one to make room
        conn.accepted += n_good
        conn.bytes_in += end - p
        with self._lock:
            self._c.accepted[conn.stream] += n_good
            self._c.bytes_in[conn.stream] += end - p
        if bad:
            self._dead_letter(conn, bad)
        if "backlog" not in self._why_muted and self._writer.size - self._consumed > self.cfg.max_backlog:
            self._mute("backlog")
        return eof

    def _foreign(self, conn: SenderConnection, what: str) -> None:
        """Reset a connection that began like another protocol: none of its bytes is read as frames."""
        conn.pending = b""
        with self._lock:
            self._c.connections_foreign[conn.stream] += 1
        self._warn("foreign-" + conn.stream, "%s port closed a connection from %s that began like %s "
                   "(%d so far; a web page or another client, never a fixish sender)", conn.stream, conn.peer,
                   what, self._c.connections_foreign[conn.stream])
        self._close(conn, reset=True)

    def _log_summary(self, now: float, force: bool = False) -> None:
        line = self._summary.line(self.stats(), now) if force or self._summary.due(now) else None
        if line:
            log.info("%s", line)

    def _dead_letter(self, conn: SenderConnection, bad: list[BadFrame]) -> None:
        if not bad:
            return
        now = time.time_ns()
        if self._dead.write([DeadLetter(now, conn.stream, conn.peer, b.reason, b.data) for b in bad]):
            self._warn("deadletter", "dead letters dropped (%d so far): %s", self._dead.dropped,
                       self._dead.error or f"over --deadletter-max-bytes {self.cfg.deadletter_max_bytes}")
        if conn.bad == 0:
            self._warn("bad-" + conn.stream, "%s connection from %s sent bad input (%s, %d bytes); set aside in %s",
                       conn.stream, conn.peer, bad[0].reason, len(bad[0].data), self.cfg.deadletter_path)
        conn.bad += len(bad)
        with self._lock:
            self._c.bad[conn.stream] += len(bad)
            for b in bad:
                cat = reason_category(b.reason)
                self._c.bad_reasons[cat] = self._c.bad_reasons.get(cat, 0) + 1

    def _close(self, conn: SenderConnection, reset: bool = False, evicted: bool = False) -> None:
        """Close a connection: cleanly (all it sent that was read is durable) or with a reset."""
        self._admit.release(conn)
        if conn.registered:
            self._sel.unregister(conn.sock)
            conn.registered = False
        conn.closed = True
        self._conns.discard(conn)
        with self._lock:             # before the close, so a sender seeing it sees the count
            self._c.connections_open[conn.stream] -= 1
            self._c.connections_reset[conn.stream] += reset
            self._c.connections_evicted[conn.stream] += evicted
        if reset:
            try:
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
            except OSError:
                pass
        try:
            conn.sock.close()
        except OSError:
            pass
        log.debug("%s connection from %s %s%s: %d messages, %d bytes, %d bad", conn.stream, conn.peer,
                  "reset" if reset else "closed", " to make room" if evicted else "", conn.accepted, conn.bytes_in,
                  conn.bad)

    # ------------------------------------------------------------------ backpressure

    def _register(self, conn: SenderConnection) -> None:
        self._sel.register(conn.sock, selectors.EVENT_READ, conn)
        conn.registered = True
        self._unpolled.append(conn)

    def _mute(self, why: str) -> None:
        """Stop reading every connection for `why` ("backlog", "disk"); TCP pushes back on senders."""
        first = not self._why_muted
        self._why_muted.add(why)
        if first:
            for conn in self._conns:
                if conn.registered:
                    self._sel.unregister(conn.sock)
                    conn.registered = False
            with self._lock:
                self._muted, self._muted_since = True, time.monotonic()
                self._c.mute_episodes += 1
            if why == "backlog":
                log.info("ingress muted: backlog %d records > %d", self._writer.size - self._consumed,
                         self.cfg.max_backlog)
        if why == "disk":                # a sender would wait out the disk, give up, and send again
            for conn in list(self._conns):      # last: a sender seeing its reset sees the ingress muted
                self._close(conn, reset=True)

    def _unmute(self, why: str) -> None:
        self._why_muted.discard(why)
        if self._why_muted or not self._muted:
            return
        now = time.monotonic()
        Admission.unmuted(self._conns, now)    # muted time is ours, not the sender's idling
        for conn in self._conns:
            if not conn.registered:
                self._register(conn)
        seconds = now - self._muted_since
        with self._lock:
            self._c.muted_seconds += seconds
            self._muted = False
        log.info("ingress resumed after %.3f s: backlog %d records", seconds,
                 self._writer.size - self._consumed)

    def _check_backpressure(self) -> None:
        self._consumed = read_consumed(self.cfg.log_dir)
        backlog = self._writer.size - self._consumed
        if "backlog" not in self._why_muted and backlog > self.cfg.max_backlog:
            self._mute("backlog")
        elif "backlog" in self._why_muted and backlog <= min(self.cfg.resume_backlog, self.cfg.max_backlog):
            self._unmute("backlog")

    def _check_disk(self) -> None:
        """Mute below the low-space mark; after a mute for the disk, resume once there is room."""
        space = disk_space(self.cfg.log_dir)
        if "disk" not in self._why_muted:
            if self._space.low(space):
                log.error("disk full: %s, below the low-space mark of %s bytes (--min-free-bytes, "
                          "--min-free-percent); ingress muted until space returns",
                          describe_free(self.cfg.log_dir), f"{self._space.mark(space):,}")
                self._mute("disk")
        elif self._space.recovered(space, self._disk_failed):
            if self._writer.size != self._writer.head:
                self._writer.rollback()          # a truncation that failed before: no append on top
            self._disk_failed = False
            log.warning("disk space back: %s; ingress resumes", describe_free(self.cfg.log_dir))
            self._unmute("disk")

    # ------------------------------------------------------------------ shutdown and stats

    def _shutdown(self) -> None:
        if self._sel is None:
            return
        unfinished = {c for c in self._conns if c.pending}   # the rest of a frame may be on its way
        if "disk" not in self._why_muted:    # a failed disk takes nothing more
            for conn in list(self._conns):
                if conn.pending:     # an unfinished frame can no longer complete
                    res = conn.scanner.scan(conn.pending, final=True)
                    conn.pending = b""
                    if len(res.payloads):
                        try:
                            self._writer.append(res.payloads, time.time_ns())
                        except OSError as e:
                            self._write_failed(e, conn)
                            break
                        if not conn.uncommitted:
                            self._touched.append(conn)
                        conn.uncommitted += len(res.payloads)
                    self._dead_letter(conn, list(res.bad))
        self._commit()
        for conn in list(self._conns):  # all they sent that was read is durable; not a cut frame
            self._close(conn, reset=conn in unfinished)
        if self._muted:
            with self._lock:
                self._c.muted_seconds += time.monotonic() - self._muted_since
                self._muted = False
        try:
            self._writer.close()
        except OSError as e:
            log.error("ingress log not closed cleanly: %s", e)
        if self._shard_files is not None:
            self._shard_files.close()
        self._dead.close()
        for ls in self._listeners:
            if ls not in [p for p, _ in self._paused]:
                self._sel.unregister(ls)
            ls.close()
        self._sel.close()
        try:
            self._write_stats()
        except OSError as e:
            log.error("ingress could not write %s: %s", STATS_FILE, e)
        self._log_summary(time.monotonic(), force=True)
        st = self.stats()
        log.info("ingress stopped: %d messages accepted (%s), %d bad, head %d", st.accepted_total,
                 ", ".join(f"{k} {v}" for k, v in st.accepted.items()), st.bad_total, st.head)

    def stats(self) -> IngressStats:
        """Return a consistent snapshot of the counters."""
        with self._lock:
            muted_s = self._c.muted_seconds + (time.monotonic() - self._muted_since if self._muted else 0.0)
            return self._c.snapshot(self._writer.head if self._writer else 0, self._consumed, self._muted, muted_s,
                                    self.ports, "disk" in self._why_muted, self._dead)

    def _write_stats(self) -> None:
        data = asdict(self.stats())
        if data == self._last_stats:
            return
        write_stats(self.cfg.log_dir, data)
        self._last_stats = data

