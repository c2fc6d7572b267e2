"""Apply the retention policy in the job's driver: delete what engine/storage/retention.py allows.

The driver knows when Spark commits and owns the checkpoint, so deletion runs here, off
the batch path, every `interval_s`: log segments below the newest committed end offset
(and any reader hold) with the shard files' segments of the same records, then result
batches beyond the age or size bound.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from engine.spark.checkpoint import committed_end_offset
from engine.config import Config
from engine.formats.log import DEFAULT_SEGMENT_RECORDS, delete_segments, first_retained, read_hold, segment_firsts
from engine.formats.shard_files import delete_shard_segments
from engine.formats.batch import batch_footprints, committed_batch, delete_batches, retained_from
from engine.storage.retention import BatchFootprint, RetentionPolicy, log_keep_from, results_keep_from, segments_to_delete

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetentionPass:
    """What one pass deleted."""
    segments: int
    log_bytes: int
    batches: int
    results_bytes: int


class RetentionWorker:
    """Background thread: delete old log segments and result batches as the policy allows.

    Keeps the footprints of the kept batches in memory (one scan of the folder at start,
    then only new batches), so a pass costs the same with a day of batches on disk.
    """

    def __init__(self, cfg: Config, policy: RetentionPolicy | None = None, interval_s: float = 1.0,
                 segment_records: int = DEFAULT_SEGMENT_RECORDS, report_s: float = 60.0):
        self.cfg = cfg
        self.policy = policy or RetentionPolicy.from_settings(cfg.log_retention, cfg.results_retention,
                                                              cfg.results_retention_bytes)
        self.interval_s = interval_s
        self.segment_records = segment_records
        self.report_s = report_s
        self._kept: deque[BatchFootprint] = deque()
        self._kept_bytes = 0
        self._scanned = retained_from(cfg.out_dir) - 1      # footprints known up to this batch
        self._totals = [0, 0, 0, 0]
        self._unremoved: list[int] = []       # doomed batches a pass could not remove: retried
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)

    def start(self) -> "RetentionWorker":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def run_once(self, now_ns: int | None = None) -> RetentionPass:
        """Delete what may go now; return what was deleted."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        segs = log_bytes = 0
        committed_end = committed_end_offset(self.cfg.checkpoint_dir)
        if self.policy.log:
            keep = log_keep_from(committed_end, read_hold(self.cfg.log_dir))
            doomed = segments_to_delete(segment_firsts(self.cfg.log_dir), self.segment_records, keep)
            log_bytes = delete_segments(self.cfg.log_dir, doomed)
            segs = len(doomed)
        # Shard files (shard_files.py) are the job's cache of the log: it never reads them below
        # its committed offset, so they go from there whether or not the log is kept (--keep-log),
        # and always at least as far as the log.
        below = max(committed_end or 0, first_retained(self.cfg.log_dir))
        log_bytes += delete_shard_segments(self.cfg.log_dir, below)
        batches = res_bytes = 0
        if self.policy.results_age_s is not None or self.policy.results_bytes is not None:
            committed = committed_batch(self.cfg.out_dir)
            if committed > self._scanned:
                new = batch_footprints(self.cfg.out_dir, self._scanned + 1, committed)
                self._kept.extend(new)
                self._kept_bytes += sum(b.nbytes for b in new)
                self._scanned = committed
            current = retained_from(self.cfg.out_dir)
            keep = results_keep_from(self._kept, committed, now_ns, self.policy, current, self._kept_bytes)
            if keep > current or self._unremoved:
                doomed_ids, self._unremoved = self._unremoved, []
                while self._kept and self._kept[0].batch < keep:
                    gone = self._kept.popleft()
                    self._kept_bytes -= gone.nbytes
                    doomed_ids.append(gone.batch)
                res_bytes, self._unremoved = delete_batches(self.cfg.out_dir, max(keep, current), doomed_ids)
                batches = max(keep, current) - current
        self._totals = [a + b for a, b in zip(self._totals, (segs, log_bytes, batches, res_bytes))]
        return RetentionPass(segs, log_bytes, batches, res_bytes)

    def _run(self) -> None:
        last_report = time.monotonic()
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except OSError as e:             # a full or failing disk must not stop the job
                log.warning("retention pass failed: %s", e)
            if time.monotonic() - last_report >= self.report_s and any(self._totals):
                s, lb, b, rb = self._totals
                log.info("retention: deleted %d log segments (%.1f MiB) and %d result batches (%.1f MiB) "
                         "in the last %.0f s", s, lb / 2**20, b, rb / 2**20, time.monotonic() - last_report)
                self._totals = [0, 0, 0, 0]
                last_report = time.monotonic()
