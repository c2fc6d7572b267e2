"""Replay fixish files to a TCP port at a controlled rate (Wallaroo's Giles sender).

Frame boundaries are found once, with numpy, so the sender can cut the stream only
between messages, count what it sent, and resume after a dropped connection at the
first message not fully handed to the kernel. Pacing works in ticks: every few
milliseconds it sends whatever a monotonic schedule says is due, as large memoryview
slices, so the rate is exact on average and unthrottled sending costs one syscall
per megabyte rather than one per message.
"""
from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.wire.fixish import HEADER

CHUNK_BYTES = 1 << 20     # largest slice per send call
TICK = 0.005              # pacing tick of --rate
STOP_GRACE = 2.0          # seconds to finish the current frame after a stop, if the peer is slow
_NEVER = sys.maxsize


@dataclass(frozen=True)
class SendReport:
    """What a send run did; `in_flight_lost` is an estimate, see `send_files`."""
    messages: int
    bytes: int
    seconds: float
    reconnects: int = 0
    in_flight_lost: int = 0
    error: str | None = None

    @property
    def rate(self) -> float:
        """Messages per second achieved."""
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """Describe the run in one line."""
        line = (f"send: {'stopped' if self.error else 'done'}: {self.messages:,} msgs, {self.bytes:,} bytes "
                f"in {self.seconds:.2f} s ({self.rate:,.0f} msgs/s)")
        if self.reconnects:
            line += (f"; {self.reconnects} reconnect(s): up to ~{self.in_flight_lost:,} msgs handed to the "
                     f"kernel before a drop may have been lost in flight (they are not re-sent)")
        return line + (f"; error: {self.error}" if self.error else "")


def frame_bounds(data: bytes | memoryview, raw: bool = False) -> np.ndarray:
    """Return the offsets [0, end_1, ..., end_n] of the frames in a framed buffer.

    Runs of equal-length frames are verified in numpy, in windows that double while the
    run lasts, so a uniform file costs O(n) vectorised work; where lengths keep changing,
    a plain walk of a few dozen frames is cheaper than numpy calls. A truncated tail
    raises ValueError, unless `raw`, which makes it one last pseudo-frame so that every
    byte is still sent.
    """
    arr = np.frombuffer(data, np.uint8)
    n = len(arr)
    parts = [np.zeros(1, np.int64)]
    pos, window = 0, 16
    while pos < n:
        size = 4 + HEADER.unpack_from(data, pos)[0] if n - pos >= 4 else None
        if size is None or pos + size > n:
            if not raw:
                why = "truncated header" if size is None else f"a {size}-byte frame overruns the end"
                raise ValueError(f"malformed framing at byte {pos} of {n}: {why} "
                                 "(use --raw to send the bytes as they are)")
            parts.append(np.array([n], np.int64))
            break
        k = min(window, (n - pos) // size)
        same = (arr[pos:pos + k * size].reshape(k, size)[:, :4] == arr[pos:pos + 4]).all(axis=1)
        run = k if bool(same.all()) else int(same.argmin())
        parts.append(pos + size * np.arange(1, run + 1, dtype=np.int64))
        pos += run * size
        if run == k:
            window *= 2
            continue
        window, walked = 16, []
        while len(walked) < 64 and n - pos >= 4 and pos + 4 + HEADER.unpack_from(data, pos)[0] <= n:
            pos += 4 + HEADER.unpack_from(data, pos)[0]
            walked.append(pos)
        parts.append(np.array(walked, np.int64))
    return np.concatenate(parts)


class _Sender:
    """One send run: the data, the socket, the counters and the stop conditions."""

    def __init__(self, host: str, port: int, data: memoryview, bounds: np.ndarray,
                 connect_timeout: float, duration: float | None, stop_event: threading.Event | None,
                 progress: bool):
        self.host, self.port, self.data, self.bounds = host, port, data, bounds
        self.n = len(bounds) - 1
        self.connect_timeout, self.duration, self.stop_event = connect_timeout, duration, stop_event
        self.progress = progress
        self.sock: socket.socket | None = None
        self.sent = self.nbytes = self.reconnects = self.lost = 0
        self.sent_on_conn = 0
        self.error: str | None = None
        self.t0 = self.last_report = time.monotonic()
        self.last_sent = 0
        self.avg_frame = max(1, len(data) // max(1, self.n))

    def stopping(self) -> bool:
        """Return whether the caller's stop event is set or the duration is over."""
        if self.stop_event is not None and self.stop_event.is_set():
            return True
        return self.duration is not None and time.monotonic() - self.t0 >= self.duration

    def connect(self) -> bool:
        """Connect, retrying with backoff for up to `connect_timeout` seconds."""
        deadline = time.monotonic() + self.connect_timeout
        delay = 0.05
        while True:
            try:
                sock = socket.create_connection((self.host, self.port),
                                                timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except OSError as e:
                if time.monotonic() + delay > deadline or (self.stop_event and self.stop_event.is_set()):
                    self.error = f"cannot connect to {self.host}:{self.port} ({e})"
                    return False
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(0.25)   # lets a stalled peer not hide a stop request
            self.sock, self.sent_on_conn = sock, 0
            return True

    def close(self) -> None:
        """Close the connection; the kernel still delivers what it has buffered."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _push(self, lo: int, hi: int) -> tuple[int, bool]:
        """Send bytes lo..hi; return (bytes the kernel took, whether the connection dropped)."""
        done, grace = 0, None
        while lo + done < hi:
            try:
                done += self.sock.send(self.data[lo + done:hi])
            except TimeoutError:
                if grace is None and self.stopping():
                    # Stop soon, but at a frame boundary: finish only the frame in progress.
                    hi = min(hi, int(self.bounds[np.searchsorted(self.bounds, lo + done)]))
                    grace = time.monotonic() + STOP_GRACE
                elif grace is not None and time.monotonic() > grace:
                    return done, False
            except OSError:
                return done, True
        return done, False

    def send_until(self, target: int) -> None:
        """Send messages until `sent` reaches `target` (message m is frame m % n)."""
        b = self.bounds
        while self.sent < target and self.error is None:
            i = self.sent % self.n
            lo = int(b[i])
            j = int(np.searchsorted(b, lo + CHUNK_BYTES, side="right")) - 1
            j = max(i + 1, min(j, self.n, i + (target - self.sent)))
            done, dropped = self._push(lo, int(b[j]))
            k = int(np.searchsorted(b, lo + done, side="right")) - 1 - i    # whole frames sent
            self.sent += k
            self.sent_on_conn += k
            self.nbytes += int(b[i + k]) - lo
            self.report_progress()
            if dropped:
                self.lost += min(self.sent_on_conn, self._sndbuf() // self.avg_frame)
                self.close()
                self.reconnects += 1
                if not self.connect():
                    return
            elif lo + done < int(b[j]) or self.stopping():
                return

    def _sndbuf(self) -> int:
        try:
            return self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        except OSError:
            return 0

    def report_progress(self) -> None:
        """Print a progress line at most once a second."""
        now = time.monotonic()
        if self.progress and now - self.last_report >= 1.0:
            cur = (self.sent - self.last_sent) / (now - self.last_report)
            print(f"send: {self.sent:,} msgs, {cur:,.0f} msgs/s", file=sys.stderr, flush=True)
            self.last_report, self.last_sent = now, self.sent


def send_acknowledged(host: str, port: int, data: bytes | Path, timeout: float = 600.0) -> int:
    """Send `data` (bytes, or a file's contents) on one connection, half-close, and wait
    until the ingress closes its side; return the bytes sent.

    The ingress closes a connection once everything it read is durable in the log, so
    the return means the whole input is logged. A file goes by `sendfile`, from the page
    cache to the socket: never read into this process (a replay's files are GBs).
    """
    with socket.create_connection((host, port), timeout=60) as s:
        if isinstance(data, Path):
            with open(data, "rb") as f:
                sent = s.sendfile(f)
        else:
            s.sendall(data)
            sent = len(data)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(timeout)
        while s.recv(4096):
            pass
    return sent


def send_files(host: str, port: int, files: list[Path], rate: float | None = None,
               batch_size: int | None = None, interval: float | None = None, loop: bool = False,
               duration: float | None = None, max_messages: int | None = None, progress: bool = True,
               stop_event: threading.Event | None = None, raw: bool = False,
               connect_timeout: float = 30.0) -> SendReport:
    """Send the files' frames, in order, to host:port; return what was sent.

    Pacing: `rate` messages/s, or `batch_size` messages every `interval` seconds, or
    unthrottled. A schedule that falls behind (a slow peer) catches up, but by at most
    one second's worth, so a stall does not end in an unbounded burst. After a dropped
    connection the sender reconnects and resends from the first frame the kernel had not
    fully taken; frames the kernel had taken may still have been lost with the
    connection, and `in_flight_lost` estimates them from the socket's send buffer size.
    """
    if rate is not None and batch_size is not None:
        raise ValueError("give either rate or batch_size/interval, not both")
    if (batch_size is None) != (interval is None):
        raise ValueError("batch_size and interval go together")
    if (rate is not None and rate <= 0) or (batch_size is not None and (batch_size <= 0 or interval <= 0)):
        raise ValueError("rate, batch size and interval must be positive")
    datas = [Path(f).read_bytes() for f in files]
    ends, offset = [], 0
    for d in datas:
        ends.append(frame_bounds(d, raw)[1:] + offset)
        offset += len(d)
    bounds = np.concatenate([np.zeros(1, np.int64), *ends])
    s = _Sender(host, port, memoryview(b"".join(datas)), bounds, connect_timeout, duration,
                stop_event, progress)
    limit = _NEVER if loop else s.n
    if max_messages is not None:
        limit = min(limit, max_messages)
    if s.n == 0 or limit == 0:
        return SendReport(0, 0, 0.0)
    connected = s.connect()
    s.t0 = s.last_report = time.monotonic()
    per_s = rate if rate is not None else (batch_size / interval if batch_size else None)
    base, max_behind = 0, int(max(per_s or 0, batch_size or 0, 1))
    tick = TICK if rate is not None else interval
    try:
        while connected and s.sent < limit and s.error is None and not s.stopping():
            if per_s is None:
                s.send_until(limit)
                continue
            elapsed = time.monotonic() - s.t0
            due = int(rate * elapsed) if rate is not None else batch_size * (int(elapsed / interval) + 1)
            behind = base + due - s.sent
            if behind > max_behind:
                base -= behind - max_behind
            s.send_until(min(limit, base + due))
            time.sleep(max(0.0, tick - (time.monotonic() - s.t0) % tick))
            s.report_progress()
    finally:
        s.close()
    rep = SendReport(s.sent, s.nbytes, time.monotonic() - s.t0, s.reconnects, s.lost, s.error)
    if progress:
        print(rep.summary(), file=sys.stderr, flush=True)
    return rep


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `send` command's flags."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--file", dest="files", type=Path, action="append", required=True,
                        help="framed fixish file; repeat to send several, in order")
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=float, help="messages per second (default: unthrottled)")
    pace.add_argument("--batch-size", type=int, help="messages per --interval-ms (Giles style)")
    parser.add_argument("--interval-ms", type=float, help="milliseconds between batches")
    parser.add_argument("--loop", action="store_true", help="start over at the end of the files")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("--max-messages", type=int, help="stop after this many messages")
    parser.add_argument("--raw", action="store_true", help="send malformed files byte for byte")
    parser.add_argument("--connect-timeout", type=float, default=30.0,
                        help="seconds to keep retrying a refused or dropped connection (default 30)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    """Run the `send` command; exit 1 if the connection could not be (re)established."""
    if (args.batch_size is None) != (args.interval_ms is None):
        raise ValueError("--batch-size and --interval-ms go together")
    rep = send_files(args.host, args.port, args.files, rate=args.rate, batch_size=args.batch_size,
                     interval=args.interval_ms / 1000 if args.interval_ms else None, loop=args.loop,
                     duration=args.duration, max_messages=args.max_messages, progress=not args.quiet,
                     raw=args.raw, connect_timeout=args.connect_timeout)
    if args.quiet:
        print(rep.summary(), file=sys.stderr)
    return 0 if rep.error is None else 1
