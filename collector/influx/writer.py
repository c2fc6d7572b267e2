"""The never-blocking batched writer the job uses: memory queue, sender thread, disk spool.

`add()` only appends to a bounded in-memory queue and returns; a background thread sends
batches; while the server does not take them the batches go to the on-disk spool, which
is backfilled (oldest first) as soon as it does again, also by the next run. A missing
database or retention policy is created when the credentials allow it, else one error
names it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Iterable

from collector.background import lower_thread_priority
from collector.influx.client import MAX_BATCH, InfluxClient, InfluxError, describe_failure, quote_ident
from collector.influx.lineproto import Point, encode_lines, encode_point, split_by_rp
from collector.influx.schema import RP_RAW, describe_policies, ensure_database, ensure_policy, setup_statements
from collector.metrics.backend import WriterStats
from collector.influx.spool import Spool

log = logging.getLogger(__package__)     # "collector.influx", as before the split into modules


class InfluxWriter:
    """Never-blocking batched writer with a bounded disk spool for outages.

    `add()` appends to an in-memory queue bounded at `max_queue` points and returns; when
    the queue is full its oldest points are encoded to the spool instead (memory keeps
    the newest), and past the spool's bound the oldest points are dropped and counted.
    A background thread
    sends a batch when `batch_size` points are queued or `interval` seconds after the
    first one. A batch the server does not take (unreachable, 5xx) goes to the spool;
    further batches are spooled without trying until the retry time (exponential
    backoff), then the oldest spool file is sent first. The spool is backfilled oldest
    first, one file per round between live batches, so fresh points stay fresh.
    `close()` flushes; what cannot be sent stays in the spool and is backfilled by the
    next writer on the same folder.

    >>> w = InfluxWriter(InfluxClient(InfluxConfig.from_env()), state_dir / "metrics-spool").start()
    >>> w.add([Point("step", {"run": "r1"}, {"ms": 12.5}, time.time_ns())])
    >>> w.close()
    """

    def __init__(self, client: InfluxClient, spool_dir: Path | str, *,
                 max_spool_bytes: int | None = None, max_queue: int = 100_000,
                 batch_size: int = MAX_BATCH, interval: float = 0.2,
                 backoff: tuple[float, float] = (0.25, 5.0), background: bool = False):
        self.client = client
        self.background = background      # send at a lower CPU priority (collector/background.py)
        self.spool_dir = Path(spool_dir)
        self._spool = Spool(self.spool_dir, client.config.spool_max_bytes if max_spool_bytes is None
                             else max_spool_bytes, target=f"{client.url.rstrip('/')} {client.config.db}")
        self.max_queue = max(1, int(max_queue))
        self.batch_size = max(1, min(int(batch_size), MAX_BATCH))
        self.interval = float(interval)
        self._backoff_min, self._backoff_max = backoff
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        # each entry: (retention policy, points, ticket of its first point)
        self._queue: deque[tuple[str | None, list[Point], int]] = deque()
        self._queued = 0
        self._busy = 0
        self._busy_first = 0                    # ticket of the oldest point being sent
        self._spilling = 0
        self._spill_firsts: list[int] = []      # tickets of the oldest point of each spill under way
        self._first_at = 0.0
        self._flushers = 0
        self._stop = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._up = True
        self._retry_at = 0.0
        self._backoff = self._backoff_min
        self._drop_warned = False
        self._c = dict(added=0, written=0, spooled=0, backfilled=0, dropped=0, rejected=0, errors=0)
        self._last_error: str | None = None

    def __repr__(self) -> str:
        return f"InfluxWriter({self.client.url!r}, db={self.client.config.db!r}, spool={str(self.spool_dir)!r})"

    # -- lifecycle

    def start(self) -> "InfluxWriter":
        """Open the spool (backfilling what a previous run left) and start the sender thread."""
        if self._thread is not None:
            return self
        self._spool.open()
        adopted, dropped = self._spool.adopt_orphans()
        if adopted:
            log.info("metrics spool %s adopted %d points other processes spooled for %s database %s%s",
                     self.spool_dir, adopted, self.client.url, self.client.config.db,
                     f" ({dropped} oldest dropped to stay within its bound)" if dropped else "")
            with self._lock:
                self._c["dropped"] += dropped
        if len(self._spool):
            log.info("metrics spool %s holds %d points (%d bytes) from before; backfilling",
                     self.spool_dir, self._spool.npoints, self._spool.nbytes)
        self._thread = threading.Thread(target=self._run, name="influx-writer", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> "InfluxWriter":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, points: Point | Iterable[Point], rp: str | None = None) -> int:
        """Queue points for writing (to retention policy `rp`); never blocks on the network.

        Returns the ticket of the last point: once `delivered()` reaches it, every point
        added so far is in InfluxDB or the disk spool (or was rejected or dropped, counted).
        Points are encoded later, on the sender thread: do not change their dicts afterwards.
        """
        pts = [points] if isinstance(points, Point) else list(points)
        if not pts:
            with self._lock:
                return self._c["added"]
        groups = split_by_rp(pts, rp)
        if len(groups) > 1 or rp not in groups:
            ticket = 0
            for r, g in groups.items():
                ticket = self.add(g, r)
            return ticket
        spill: list[tuple[str | None, list[Point], int]] = []      # oldest first
        with self._lock:
            first = self._c["added"] + 1
            self._c["added"] += len(pts)
            ticket = self._c["added"]
            if self._closed:
                spill.append((rp, pts, first))
            else:
                newest_spill = None
                if len(pts) > self.max_queue:
                    cut = len(pts) - self.max_queue
                    newest_spill, pts, first = (rp, pts[:cut], first), pts[cut:], first + cut
                # full queue (sender behind, or server slow): the oldest queued points go to
                # disk, so memory keeps the newest and the spool stays roughly in time order
                excess = self._queued + len(pts) - self.max_queue
                while excess > 0:
                    qrp, qpts, qfirst = self._queue[0]
                    if len(qpts) > excess:
                        self._queue[0] = (qrp, qpts[excess:], qfirst + excess)
                        qpts = qpts[:excess]
                    else:
                        self._queue.popleft()
                    spill.append((qrp, qpts, qfirst))
                    self._queued -= len(qpts)
                    excess -= len(qpts)
                if newest_spill:
                    spill.append(newest_spill)
                if not self._queued:
                    self._first_at = time.monotonic()
                self._queue.append((rp, pts, first))
                self._queued += len(pts)
                if self._queued >= self.batch_size or self._queued == len(pts):
                    self._cond.notify()
            if not spill:
                return ticket
            spill_first = min(f for _, _, f in spill)
            self._spilling += 1                           # flush() waits for it
            self._spill_firsts.append(spill_first)
        try:
            for srp, spts, _ in spill:
                for i in range(0, len(spts), self.batch_size):
                    self._to_spool(spts[i:i + self.batch_size], srp, encoded=None)
        finally:
            with self._cond:
                self._spilling -= 1
                self._spill_firsts.remove(spill_first)
                self._cond.notify_all()
        return ticket

    def delivered(self) -> int:
        """Return the newest ticket up to which every added point has left memory.

        Such points are in InfluxDB or in the disk spool (which outlives a crash of this
        process), or were rejected or dropped and counted. What a caller must not lose on
        a crash it keeps until this reaches the ticket `add()` gave it.
        """
        with self._lock:
            oldest = [self._queue[0][2]] if self._queue else []
            if self._busy:
                oldest.append(self._busy_first)
            oldest += self._spill_firsts
            return min(oldest) - 1 if oldest else self._c["added"]

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything queued and backfill the spool; return False if time ran out first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._thread is None or self._stop:
                return self._queued == 0 and not len(self._spool)
            self._flushers += 1
            self._retry_at = 0.0                          # a flush retries a down server now
            errors = self._c["errors"]
            self._cond.notify_all()
            try:
                while self._queued or self._busy or self._spilling or len(self._spool):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    if (self._c["errors"] > errors + 1 and not self._queued and not self._busy
                            and not self._spilling):
                        return False                      # server down: all is spooled, no use waiting
                    self._cond.wait(min(left, 0.05))
                return True
            finally:
                self._flushers -= 1

    def close(self, timeout: float = 10.0) -> bool:
        """Flush for up to `timeout` s, stop the thread, spool what is left; True if nothing is left."""
        if self._closed:
            return not len(self._spool)
        ok = self.flush(timeout) if self._thread is not None else False
        if self._thread is None and self._queued:
            self._spool.open()                            # never started: keep the points for the next run
        with self._cond:
            self._stop = True
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(1.0, timeout))
            if self._thread.is_alive():
                log.warning("metrics writer: sender still busy after %.1f s (slow server?); leaving it", timeout)
        with self._lock:
            left = list(self._queue)
            self._queue.clear()
            self._queued = 0
        for rp, pts, _ in left:
            for i in range(0, len(pts), self.batch_size):
                self._to_spool(pts[i:i + self.batch_size], rp, encoded=None)
        if len(self._spool):
            log.warning("metrics writer closed with %d points (%d bytes) in %s; the next writer to this "
                        "server and database (any process of the state folder) backfills them",
                        self._spool.npoints, self._spool.nbytes, self.spool_dir)
        self._spool.close()
        self.client.close()
        return ok and not len(self._spool)

    def stats(self) -> WriterStats:
        """Return the counters (cheap: safe to call every second)."""
        with self._lock:
            c = self._c
            return WriterStats(c["added"], c["written"], c["spooled"], c["backfilled"], c["dropped"],
                               c["rejected"], c["errors"], self._last_error, self._spool.nbytes,
                               self._spool.npoints, self._queued, self._up)

    # -- sender thread

    def _take(self) -> list[tuple[str | None, list[Point]]]:
        # called with the lock held: up to batch_size points, split per retention policy
        out: dict[str | None, list[Point]] = {}
        n = 0
        if self._queue:
            self._busy_first = self._queue[0][2]
        while self._queue and n < self.batch_size:
            rp, pts, first = self._queue[0]
            k = self.batch_size - n
            if len(pts) > k:
                self._queue[0] = (rp, pts[k:], first + k)
                pts = pts[:k]
            else:
                self._queue.popleft()
            out.setdefault(rp, []).extend(pts)
            n += len(pts)
        self._queued -= n
        self._busy = n
        if self._queued:
            self._first_at = time.monotonic()
        return list(out.items())

    def _run(self) -> None:
        if self.background:
            lower_thread_priority()
        while True:
            try:
                with self._cond:
                    batch = self._wait_for_work()
                if batch is None:
                    self.client.close()                   # this thread's connection
                    return
                for rp, pts in batch:
                    self._send_live(rp, pts)
                if len(self._spool) and self._may_try():
                    self._backfill_one()
            except Exception:                             # never let the sender die silently
                log.exception("metrics writer: unexpected error; continuing")
                time.sleep(0.1)
            finally:
                with self._cond:
                    self._busy = 0
                    self._cond.notify_all()

    def _wait_for_work(self) -> list | None:
        while True:
            if self._stop:
                return None
            now = time.monotonic()
            due = self._queued >= self.batch_size or (
                self._queued and (self._flushers or now >= self._first_at + self.interval))
            spool_due = len(self._spool) and now >= self._retry_at
            if due or spool_due:
                return self._take() if due else []
            waits = []
            if self._queued:
                waits.append(self._first_at + self.interval - now)
            if len(self._spool):
                waits.append(self._retry_at - now)
            self._cond.wait(max(0.001, min(waits)) if waits else None)

    def _may_try(self) -> bool:
        return self._up or time.monotonic() >= self._retry_at

    def _encode(self, pts: list[Point]) -> tuple[bytes, int]:
        """Encode a batch; points line protocol cannot carry are counted as rejected."""
        try:
            body = encode_lines(pts)
            return body, len(pts)
        except (ValueError, TypeError, AttributeError):
            lines, bad, err = [], 0, ""
            for p in pts:
                try:
                    line = encode_point(p)
                except (ValueError, TypeError, AttributeError) as e:
                    bad, err = bad + 1, str(e)
                    continue
                if line is not None:
                    lines.append(line)
            with self._lock:
                self._c["rejected"] += bad
                self._last_error = f"unencodable point: {err}"
            log.warning("metrics writer: %d points cannot be encoded (%s); rejected", bad, err)
            return ("\n".join(lines) + "\n").encode() if lines else b"", len(pts) - bad

    def _write(self, body: bytes, rp: str | None) -> None:
        """Send one batch; if its database or retention policy is missing, create it (when allowed) and resend."""
        try:
            self.client.write_lines(body, rp)
        except InfluxError as e:
            if not (e.database_missing or e.policy_missing):
                raise
            self._set_up(e, rp)
            self.client.write_lines(body, rp)

    def _set_up(self, e: InfluxError, rp: str | None) -> None:
        # Telegraf's way: a missing database is created with the project's policies. Raise
        # one clear error naming what to create when the credentials may not do it.
        db, url = self.client.config.db, self.client.url
        try:
            if e.database_missing:
                ensure_database(self.client)
                what = f"database {db!r} with retention policies {describe_policies()}"
            # without `rp` the database has no default policy at all (a server with
            # retention-autocreate off): ours becomes it; a user's own default is never changed
            elif ensure_policy(self.client, rp or RP_RAW, default=not rp):
                what = f"retention policy {rp or RP_RAW!r} on database {db!r}"
            else:
                raise e
        except InfluxError as err:
            if err is e:
                raise
            todo = setup_statements(db) if e.database_missing else [
                s for s in setup_statements(db) if f"POLICY {quote_ident(rp or RP_RAW)} " in s]
            raise InfluxError(
                f"{e}; these credentials cannot create it ({err}): an InfluxDB admin runs "
                f"`marketspread influxdb init` with MS_INFLUX_URL={url} MS_INFLUX_DB={db}, or: "
                + "; ".join(todo), e.status) from None
        log.warning("metrics writer: created %s on %s", what, url)

    def _send_live(self, rp: str | None, pts: list[Point]) -> None:
        body, n = self._encode(pts)
        skipped = n - body.count(b"\n")                   # points without a finite field
        if skipped:
            with self._lock:
                self._c["rejected"] += skipped
        if not body:
            return
        if not self._may_try():
            self._to_spool(None, rp, encoded=body)
            return
        t0 = time.perf_counter()
        try:
            self._write(body, rp)
        except InfluxError as e:
            if e.retryable:
                self._went_down(e)
                self._to_spool(None, rp, encoded=body)
            else:
                self._rejected(e, body.count(b"\n"))
            return
        self._went_up()
        n = body.count(b"\n")
        with self._lock:
            self._c["written"] += n
        log.debug("metrics writer: wrote %d points (rp=%s, %d bytes) in %.1f ms",
                  n, rp or "default", len(body), (time.perf_counter() - t0) * 1e3)

    def _backfill_one(self) -> None:
        claim = self._spool.claim_oldest()
        if claim is None:
            return
        f, body = claim
        try:
            self._write(body, f.rp)
        except InfluxError as e:
            if e.retryable:
                self._spool.release(f, done=False)
                self._went_down(e)
            else:
                self._spool.release(f, done=True)
                self._rejected(e, f.points)
            return
        self._spool.release(f, done=True)
        self._went_up()
        with self._lock:
            self._c["backfilled"] += f.points
        log.debug("metrics writer: backfilled %d points (rp=%s) from %s; %d points left in spool",
                  f.points, f.rp or "default", f.path.name, self._spool.npoints)

    def _to_spool(self, pts: list[Point] | None, rp: str | None, encoded: bytes | None) -> None:
        if encoded is None:
            encoded, _ = self._encode(pts or [])
        if not encoded:
            return
        try:
            stored, dropped = self._spool.append(encoded, rp)
        except OSError as e:
            n = encoded.count(b"\n")
            with self._lock:
                self._c["dropped"] += n
                self._last_error = f"spool write failed: {e}"
            log.warning("metrics writer: cannot write spool %s (%s); %d points dropped", self.spool_dir, e, n)
            return
        with self._lock:
            self._c["spooled"] += stored
            self._c["dropped"] += dropped
            warn = dropped and not self._drop_warned
            if warn:
                self._drop_warned = True
        if warn:
            log.warning("metrics writer: spool %s is full (%d bytes); dropping the oldest points",
                        self.spool_dir, self._spool.max_bytes)

    def _went_down(self, e: InfluxError) -> None:
        with self._lock:
            self._c["errors"] += 1
            self._last_error = str(e)
            was_up, self._up = self._up, False
            self._retry_at = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, self._backoff_max)
        if was_up:
            log.warning("metrics writer: %s; spooling to %s and retrying", describe_failure(e, self.client.config),
                        self.spool_dir)

    def _went_up(self) -> None:
        if self._up:
            return
        with self._lock:
            self._up = True
            self._backoff = self._backoff_min
            self._drop_warned = False
        log.warning("metrics writer: InfluxDB at %s takes writes again; backfilling %d spooled points",
                    self.client.url, self._spool.npoints)

    def _rejected(self, e: InfluxError, n: int) -> None:
        with self._lock:
            self._c["errors"] += 1
            self._c["rejected"] += n
            again, self._last_error = self._last_error == str(e), str(e)
        if not again:                     # one line per new reason, not one per batch
            log.warning("metrics writer: server rejected a batch of %d points: %s", n, e)
