"""Stream committed results to a TCP receiver (Wallaroo's sink), off the Spark path.

Tails the committed batches and sends each committed batch's OrderResult frames. The
files are the exactly-once output; this stream is at-least-once at batch granularity:
the position (next batch) is saved after each batch is sent, so a crash between the
send and the save resends that batch.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

from .results import BatchTail, CommittedBatch

log = logging.getLogger(__name__)


class ResultForwarder:
    """Background thread: committed results -> `host:port`, reconnecting with backoff."""

    def __init__(self, out_dir: Path, host: str, port: int, poll_s: float = 0.02):
        self.out_dir = Path(out_dir)
        self.addr = (host, port)
        self.poll_s = poll_s
        self._pos_path = self.out_dir / "forwarded"
        start = int(self._pos_path.read_text()) if self._pos_path.exists() else 0
        self.tail = BatchTail(self.out_dir, start)
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="result-forwarder", daemon=True)

    def start(self) -> "ResultForwarder":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _connect(self) -> socket.socket:
        delay = 0.1
        while not self._stop.is_set():
            try:
                return socket.create_connection(self.addr, timeout=10)
            except OSError as e:
                log.warning("result receiver %s:%d unreachable (%s); retrying", *self.addr, e)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)
        raise ConnectionAbortedError("stopped")

    def _run(self) -> None:
        sock = None
        pending: list[CommittedBatch] = []
        while not self._stop.is_set():
            pending += self.tail.poll()
            if not pending:
                self._stop.wait(self.poll_s)
                continue
            try:
                sock = sock or self._connect()
                for m in list(pending):
                    for part in m.parts:
                        sock.sendall(part.read_bytes())
                    self.sent += m.count
                    self._pos_path.write_text(str(m.batch + 1))
                    pending.pop(0)
            except ConnectionAbortedError:
                break
            except OSError as e:
                log.warning("sending results failed (%s); reconnecting", e)
                if sock is not None:
                    sock.close()
                sock = None
                time.sleep(0.1)
        if sock is not None:
            sock.close()
