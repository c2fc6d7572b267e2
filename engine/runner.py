"""Run the streaming job as a long-lived process with progress lines and clean stops."""
from __future__ import annotations

import logging
import signal
import threading
import time

from .config import Config

log = logging.getLogger(__name__)


def run_job(cfg: Config, duration: float | None = None, forward: str | None = None) -> int:
    """Serve the Market Spread query until SIGTERM/SIGINT or `duration`; return exit code."""
    from .ingress_log import read_consumed, read_head
    from .job import start_query, stop_query
    from .spark_session import build_session

    cfg.log_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    from .retention import RetentionPolicy
    policy = RetentionPolicy.from_settings(cfg.log_retention, cfg.results_retention, cfg.results_retention_bytes)
    spark = build_session(cfg.master, shards=cfg.shards, ui=cfg.spark_ui, temp_root=cfg.state_dir / "spark-tmp",
                          checkpoint_batches=cfg.checkpoint_batches)
    shipper = writer = listener = alerts = None
    if cfg.metrics:
        from .metrics_shipper import MetricsShipper, run_id_for
        from .metrics_wiring import attach_listener, open_writer
        run = run_id_for(cfg.state_dir)
        writer = open_writer(cfg.state_dir, "job", background=True)
        shipper = MetricsShipper(cfg.out_dir, run, writer, tasks=cfg.shards).start()
        listener = attach_listener(spark, run, writer, cfg.log_dir)
        from alerts.evaluator import start_evaluator
        alerts = start_evaluator(cfg.state_dir, writer)
    query = start_query(spark, cfg, listener)
    log.info("job started on %s: log %s, results %s, checkpoint %s", cfg.master, cfg.log_dir,
             cfg.out_dir, cfg.checkpoint_dir)
    from .retention_worker import RetentionWorker
    retention = RetentionWorker(cfg, policy).start()
    forwarder = None
    if forward:
        from .forwarder import ResultForwarder
        host, _, port = forward.rpartition(":")
        forwarder = ResultForwarder(cfg.out_dir, host or "127.0.0.1", int(port)).start()
    t_end = time.monotonic() + duration if duration else None
    last, last_consumed = time.monotonic(), read_consumed(cfg.log_dir)
    try:
        while not stop.wait(0.5):
            if query.exception() is not None:
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
        if listener is not None:
            from .metrics_wiring import detach_listener
            detach_listener(spark, listener)
        if forwarder is not None:
            forwarder.stop()
        if alerts is not None:
            alerts.stop()
        if shipper is not None:
            shipper.stop()
            writer.close(timeout=10)
        spark.stop()
        log.info("job stopped")
    return 0
