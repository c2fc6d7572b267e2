"""Stream committed results to a TCP receiver (Wallaroo's sink), off the Spark path.

Tails the committed batches and sends each committed batch's OrderResult frames. The
files are the exactly-once output; this stream is at-least-once at batch granularity:
the position (next batch) is saved after each batch is sent, so a crash between the
send and the save resends that batch. A forwarder that falls behind the results
retention (its receiver down for longer than the retention) logs how many batches it
lost and goes on with the oldest batch still kept; it never sends part of a batch.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

from engine.formats.batch import BatchTail, CommittedBatch, retained_from

log = logging.getLogger(__name__)


class ResultForwarder:
    """Background thread: committed results -> `host:port`, reconnecting with backoff."""

    def __init__(self, out_dir: Path, host: str, port: int, poll_s: float = 0.02):
        self.out_dir = Path(out_dir)
        self.addr = (host, port)
        self.poll_s = poll_s
        self._pos_path = self.out_dir / "forwarded"
        start = int(self._pos_path.read_text()) if self._pos_path.exists() else 0
        self.tail = BatchTail(self.out_dir, start, reader="the result forwarder")
        self.sent = 0
        self._lost = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="result-forwarder", daemon=True)

    @property
    def missed(self) -> int:
        """Batches lost to retention before they were sent."""
        return self._lost + self.tail.missed

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

    def _whole(self, m: CommittedBatch) -> bytes | None:
        """The batch's frames, or None if retention deleted it before they were all read."""
        try:
            data = b"".join(p.read_bytes() for p in m.parts)
        except FileNotFoundError:
            data = None
        return None if m.batch < retained_from(self.out_dir) else data

    def _drop_deleted(self, pending: list[CommittedBatch]) -> list[CommittedBatch]:
        """Drop the pending batches retention deleted before they were sent, with one warning."""
        first = retained_from(self.out_dir)
        # (a batch whose files went some other way, not by retention, is dropped the same way)
        lost = [m for m in pending if m.batch < first] or pending[:1]
        if lost:
            log.warning("the result forwarder fell behind the results retention: batches %d..%d (%d batches) "
                        "were deleted before it sent them; continuing at batch %d",
                        lost[0].batch, lost[-1].batch, len(lost), lost[-1].batch + 1)
            self._lost += len(lost)
            self._pos_path.write_text(str(lost[-1].batch + 1))
        return [m for m in pending if m.batch > lost[-1].batch]

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
                while pending:
                    m = pending[0]
                    data = self._whole(m)
                    if data is None:
                        pending = self._drop_deleted(pending)
                        continue
                    sock.sendall(data)
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
