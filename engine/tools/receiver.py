"""Collect result frames (u32 55 + 55-byte OrderResult) from any number of connections.

One selector thread serves the listening socket and every connection, so frames from
different connections never interleave in the output file and no lock guards it. Only
whole, well-formed frames are written; malformed ones are counted and dropped. A
buffer of back-to-back good frames is checked in one numpy comparison and written in
one call.
"""
from __future__ import annotations

import argparse
import selectors
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

from engine.wire.fixish import HEADER, RESULT_LEN

FRAME_LEN = 4 + RESULT_LEN
MAX_FRAME = 1 << 16        # a longer claimed length means the stream is garbage: drop the connection
_HDR = np.frombuffer(HEADER.pack(RESULT_LEN), np.uint8)


def split_results(data: bytes) -> tuple[list[memoryview], int, int, int, bool]:
    """Split a connection's bytes into (good spans, good count, malformed count, consumed, fatal).

    A frame whose length is not 55 is malformed and skipped by its claimed length; a
    claimed length above MAX_FRAME cannot be skipped safely, so it is `fatal`.
    """
    mv = memoryview(data)
    k = len(data) // FRAME_LEN
    if k and bool((np.frombuffer(data, np.uint8, k * FRAME_LEN).reshape(k, FRAME_LEN)[:, :4] == _HDR).all()):
        good, n_good, pos = [mv[:k * FRAME_LEN]], k, k * FRAME_LEN
    else:
        good, n_good, pos = [], 0, 0
    bad, n = 0, len(data)
    while n - pos >= 4:
        (length,) = HEADER.unpack_from(data, pos)
        if length > MAX_FRAME:
            return good, n_good, bad + 1, n, True
        if pos + 4 + length > n:
            break
        if length == RESULT_LEN:
            good.append(mv[pos:pos + FRAME_LEN])
            n_good += 1
        else:
            bad += 1
        pos += 4 + length
    return good, n_good, bad, pos, False


class Receiver:
    """Listen on host:port and append every well-formed result frame to `out_path`.

    `count` moves only after the frames are flushed to the file, so a caller that saw
    `wait_for(n)` succeed can read n records from it.

        with Receiver("127.0.0.1", 0, Path("out.bin")) as rec:
            send_results_to(rec.port)
            assert rec.wait_for(1000, timeout=10)
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, out_path: Path = Path("results.bin"),
                 progress: bool = False):
        self.host, self.out_path, self.progress = host, Path(out_path), progress
        self._port = port
        self.count = 0
        self.malformed = 0
        self.connections = 0                      # accepted so far
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._lsock: socket.socket | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        return self._lsock.getsockname()[1] if self._lsock else self._port

    def start(self) -> "Receiver":
        """Bind, listen and start serving in a background thread."""
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((self.host, self._port))
        lsock.listen(128)
        lsock.setblocking(False)
        self._lsock = lsock
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self._out = open(self.out_path, "ab")
        self._thread = threading.Thread(target=self._serve, name=f"receiver-{self.port}", daemon=True)
        self._thread.start()
        return self

    def wait_for(self, n: int, timeout: float | None = None) -> bool:
        """Block until at least `n` records were written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self.count >= n, timeout)

    def stop(self) -> None:
        """Stop serving, close every socket and the file (partial frames count as malformed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._lsock, selectors.EVENT_READ, None)
        pending: dict[socket.socket, bytes] = {}
        last_t, last_n = time.monotonic(), 0
        try:
            while not self._stop.is_set():
                written = bad = 0
                for key, _ in sel.select(0.1):
                    if key.data is None:
                        try:
                            conn, _ = self._lsock.accept()
                        except BlockingIOError:
                            continue
                        conn.setblocking(False)
                        sel.register(conn, selectors.EVENT_READ, True)
                        pending[conn] = b""
                        self.connections += 1
                        continue
                    conn = key.fileobj
                    try:
                        chunk = conn.recv(1 << 20)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    if chunk:
                        data = pending[conn] + chunk if pending[conn] else chunk
                        good, n_good, n_bad, used, close = split_results(data)
                        for span in good:
                            self._out.write(span)
                        written, bad = written + n_good, bad + n_bad
                        pending[conn] = data[used:]
                    else:
                        bad += bool(pending[conn])           # the connection ended inside a frame
                        close = True
                    if close:
                        sel.unregister(conn)
                        conn.close()
                        del pending[conn]
                if written or bad:
                    self._out.flush()
                    with self._cond:
                        self.count += written
                        self.malformed += bad
                        self._cond.notify_all()
                now = time.monotonic()
                if self.progress and now - last_t >= 1.0:
                    print(f"receive: {self.count:,} records ({(self.count - last_n) / (now - last_t):,.0f}/s), "
                          f"{self.malformed:,} malformed, {len(pending)} open connection(s)",
                          file=sys.stderr, flush=True)
                    last_t, last_n = now, self.count
        finally:
            with self._cond:
                self.malformed += sum(1 for rest in pending.values() if rest)
            for conn in pending:
                conn.close()
            sel.close()
            self._lsock.close()
            self._out.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `receive` command's flags."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="port to listen on (0: any free port)")
    parser.add_argument("--out", type=Path, required=True, help="file to append result frames to")
    parser.add_argument("--expect", type=int, help="exit 0 once this many records arrived")
    parser.add_argument("--timeout", type=float,
                        help="seconds to wait: with --expect, exit 1 if they did not all arrive")


def run(args: argparse.Namespace) -> int:
    """Run the `receive` command until --expect records arrived, --timeout passed, or Ctrl-C."""
    rec = Receiver(args.host, args.port, args.out, progress=True).start()
    print(f"receive: listening on {args.host}:{rec.port}, appending to {args.out}", file=sys.stderr, flush=True)
    try:
        if args.expect is not None:
            ok = rec.wait_for(args.expect, args.timeout)
        else:
            threading.Event().wait(args.timeout)      # until the timeout, or forever (Ctrl-C)
            ok = True
    finally:
        rec.stop()
    print(f"receive: {'done' if ok else 'timed out'}: {rec.count:,} records"
          f"{f' of {args.expect:,} expected' if args.expect is not None else ''}, "
          f"{rec.malformed:,} malformed, {rec.connections} connection(s)", file=sys.stderr, flush=True)
    return 0 if ok else 1
