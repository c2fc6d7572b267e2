"""Run the streaming job as a long-lived process with progress lines and clean stops."""
from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from pathlib import Path

from alerts.evaluator import start_evaluator
from alerts.settings import AlertSettings
from collector.influx import InfluxClient, InfluxConfig

from engine.config import Config
from engine.formats.log import read_consumed, read_head
from engine.output.forwarder import ResultForwarder
from engine.output.metrics_shipper import MetricsShipper, run_id_for
from engine.formats.batch import BATCHES
from engine.spark.checkpoint import hold_checkpoint, lost_checkpoint, release_checkpoint
from engine.spark.rescale import PAUSE_POINTS, Rescale, settle_rescale
from engine.spark.job import start_query, stop_query
from engine.spark.session import build_session
from engine.storage.diskspace import describe_free, full_path, is_disk_full
from engine.storage.retention import RetentionPolicy
from marketspread.retention_worker import RetentionWorker
from collector.safe_delete import refuse_linked_folders, remove_in
from marketspread.metrics_wiring import attach_monitor, open_writer, rescale_point
from marketspread.progress import ConsumedOffsetListener

log = logging.getLogger(__name__)


class DiskFull(RuntimeError):
    """The job's results or checkpoint could not be written: it stopped, having lost nothing."""


def _disk_full(cfg: Config, exc: BaseException | None = None) -> DiskFull:
    where = full_path(exc, [cfg.out_dir, cfg.checkpoint_dir, cfg.log_dir, cfg.state_dir])
    return DiskFull(f"disk full: {describe_free(where)}; the job stopped without committing "
                    "the batch it was writing (nothing is lost: free space and start it again, it "
                    "resumes from its checkpoint)")


# Spark writes a checkpoint file as `.<name>.<uuid>.tmp` (and Hadoop its `..<name>.<uuid>.tmp.crc`),
# then renames it; a write that fails in close(), as on a full disk, leaves the temp file behind.
_SPARK_TEMP = re.compile(r"^\..+\.[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.tmp(\.crc)?$")


def remove_unfinished_checkpoint_writes(checkpoint_dir: str | os.PathLike) -> list[Path]:
    """Delete the temp files of checkpoint writes that never completed; return them.

    Spark 4 refuses to start batch 0 beside one (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY),
    so a job stopped by a full disk in its first batch could not restart. Only a job starts
    on its checkpoint, and none runs yet, so no write is in progress.
    """
    removed = []
    for root, _, files in os.walk(checkpoint_dir):
        for name in files:
            if _SPARK_TEMP.match(name):
                path = Path(root) / name
                remove_in(checkpoint_dir, path)
                removed.append(path)
    return removed


def _pauser(point: str | None):
    """The rescale's pause hook for `--pause-rescale-at POINT` (crash tests): sleep there until killed."""
    if point is None:
        return None
    if point not in PAUSE_POINTS:
        raise ValueError(f"--pause-rescale-at takes one of {', '.join(PAUSE_POINTS)}, not {point!r}")

    def pause(at: str) -> None:
        if at == point:
            log.warning("rescale paused at %s (--pause-rescale-at)", at)
            threading.Event().wait()
    return pause


def rescale_offline(cfg: Config, pause: str | None = None) -> list[Rescale]:
    """Re-partition a stopped job's checkpoint to `cfg.shards` (`marketspread rescale`); return what was done."""
    refuse_linked_folders([cfg.out_dir, cfg.out_dir / BATCHES, cfg.checkpoint_dir, cfg.shard_state_dir])
    hook = _pauser(pause)
    lock = hold_checkpoint(cfg.checkpoint_dir)
    try:
        return settle_rescale(cfg, hook)
    finally:
        release_checkpoint(lock)


def run_job(cfg: Config, duration: float | None = None, forward: str | None = None, *,
            influx: InfluxConfig, alerts: AlertSettings, rescale_pause: str | None = None) -> int:
    """Serve the Market Spread query until SIGTERM/SIGINT or `duration`; return exit code.

    With metrics on, they go to `influx` and the alert rules of `alerts` are evaluated
    (both built by the CLI from the environment, once).

    Raises DiskFull (one line for the user) when a write of results or checkpoint found
    no space, at start or in any batch: Spark commits a batch only after all its files are
    written, so the restarted job redoes that batch and its results are exact.
    """
    try:
        return _run_job(cfg, duration, forward, influx, alerts, _pauser(rescale_pause))
    except DiskFull:
        raise
    except Exception as e:
        if is_disk_full(e):
            raise _disk_full(cfg, e) from None
        raise


def _run_job(cfg: Config, duration: float | None, forward: str | None, influx: InfluxConfig,
             alerts_settings: AlertSettings, pause) -> int:
    refuse_linked_folders([cfg.log_dir, cfg.out_dir, cfg.out_dir / BATCHES, cfg.checkpoint_dir, cfg.shard_state_dir])
    if (lost := lost_checkpoint(cfg)) is not None:
        raise ValueError(lost)
    lock = hold_checkpoint(cfg.checkpoint_dir)
    try:
        # Before the query plans a batch: a new --shards re-partitions the state, or finishes a
        # re-partition a crash cut short (engine/spark/rescale.py).
        rescales = settle_rescale(cfg, pause)
        return _serve(cfg, duration, forward, influx, alerts_settings, rescales)
    finally:
        release_checkpoint(lock)


def _serve(cfg: Config, duration: float | None, forward: str | None, influx: InfluxConfig,
           alerts_settings: AlertSettings, rescales: list[Rescale]) -> int:
    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    if removed := remove_unfinished_checkpoint_writes(cfg.checkpoint_dir):
        log.info("removed %d unfinished checkpoint writes (a full disk or a crash left them): %s",
                 len(removed), ", ".join(str(p.relative_to(cfg.checkpoint_dir)) for p in removed[:5]))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    policy = RetentionPolicy.from_settings(cfg.log_retention, cfg.results_retention, cfg.results_retention_bytes)
    spark = build_session(cfg.master, shards=cfg.shards, ui=cfg.spark_ui,
                          checkpoint_batches=cfg.checkpoint_batches)
    shipper = writer = monitor = alerts = None
    if cfg.metrics:
        run = run_id_for(cfg.state_dir)
        writer = open_writer(cfg.state_dir, "job", influx, background=True)
        writer.add([rescale_point(run, r) for r in rescales])
        shipper = MetricsShipper(cfg.out_dir, run, writer, tasks=cfg.shards).start()
        monitor = attach_monitor(spark, run, writer, cfg)
        alerts = start_evaluator(cfg.state_dir, writer, client=InfluxClient(influx), settings=alerts_settings)
    bytes_read = spark.sparkContext.accumulator(0) if cfg.count_bytes_read else None
    first_consumed = read_consumed(cfg.log_dir)
    query = start_query(spark, cfg, monitor, consumed=ConsumedOffsetListener(str(cfg.log_dir), None),
                        bytes_read=bytes_read)
    log.info("job started on %s: log %s, results %s, checkpoint %s", cfg.master, cfg.log_dir,
             cfg.out_dir, cfg.checkpoint_dir)
    retention = RetentionWorker(cfg, policy).start()
    forwarder = None
    if forward:
        host, _, port = forward.rpartition(":")
        forwarder = ResultForwarder(cfg.out_dir, host or "127.0.0.1", int(port)).start()
    t_end = time.monotonic() + duration if duration else None
    last, last_consumed = time.monotonic(), read_consumed(cfg.log_dir)
    failure: DiskFull | None = None
    try:
        while not stop.wait(0.5):
            if query.exception() is not None:
                if is_disk_full(query.exception()):
                    failure = _disk_full(cfg, query.exception())
                    break
                log.error("query failed: %s", query.exception())
                return 1
            if t_end and time.monotonic() >= t_end:
                break
            now = time.monotonic()
            if now - last >= 5:
                # Spark's row counts are blocks of events (records.py); count events in the log.
                consumed, head = read_consumed(cfg.log_dir), read_head(cfg.log_dir)
                p = query.lastProgress or {}
                log.info("batch %s: %.0f events/s committed, last batch %s ms, backlog %d events",
                         p.get("batchId", "-"), (consumed - last_consumed) / (now - last),
                         (p.get("durationMs") or {}).get("triggerExecution", "-"), head - consumed)
                last, last_consumed = now, consumed
    finally:
        stop_query(spark, query)
        retention.stop()
        if monitor is not None:
            monitor.stop()
        if forwarder is not None:
            forwarder.stop()
        if alerts is not None:
            alerts.stop()
        if shipper is not None:
            shipper.stop()
            writer.close(timeout=10)
        if bytes_read is not None:
            events = read_consumed(cfg.log_dir) - first_consumed
            log.info("job read %d bytes of ingress records (log or shard files) for %d events committed: "
                     "%.1f bytes/event, %d shards", bytes_read.value, events, bytes_read.value / max(1, events),
                     cfg.shards)
        spark.stop()
        log.info("job stopped")
    if failure is not None:
        raise failure
    return 0
