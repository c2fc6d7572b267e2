"""Deterministic replay: files -> TCP ingress -> Spark job -> result file, then exit.

The same path as a live run (the ingress server, the streaming query, the exactly-once
sink); only the input is finite. Every NBBO file enters the ingress before any order
file, so the result is a function of the files alone.
"""
from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from collector.influx import InfluxConfig
from collector.names import check_name
from collector.safe_delete import try_remove_tree
from collector.settings import env_is_set

from engine.config import Config
from engine.formats.log import read_consumed
from engine.ingress.server import IngressServer
from engine.output.metrics_shipper import MetricsShipper
from engine.formats.batch import read_committed
from engine.spark.session import build_session
from engine.tools.sender import send_acknowledged
from engine.wire.fixish import STREAM_NBBO, STREAM_ORDERS
from marketspread.metrics_wiring import IngressMetrics, attach_monitor, open_writer
from marketspread.replay_timing import ReplayMoments, ReplayTiming, batch_spans, replay_timing

log = logging.getLogger(__name__)
# The query starts once the warm-up job has left its worker idle: a first batch that
# started while that job still ran forked a cold worker and took 2-3x as long.
WARM_WAIT_S = 10.0
PROGRESS_POLL_S = 2.0                  # how often the query's progress reports are collected
# Spark keeps a query's last N progress reports (100 by default); between two collections
# a replay of small batches runs more than 100 (measured: 40-ms batches).
PROGRESS_KEPT = 1000
# A replay's driver JVM lives one run and only plans, commits and passes a few rows per
# batch; the work is in the Python workers. The serial collector runs no GC threads, leaving
# the cores to Python during start-up and the first batch (docs/PERFORMANCE.md, "Design
# decisions", start-up); every session's driver compiles with C1 alone (engine/spark/session.py).
QUICK_START = {"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"}


@dataclass(frozen=True)
class ReplayReport:
    """What a replay did."""
    run_id: str
    accepted: int
    bad: int
    results: int
    seconds: float
    out: Path
    metrics: object | None = None      # collector.influx.WriterStats when metrics were shipped
    timing: ReplayTiming | None = None # where the wall time went (replay_timing.py)


def _wait_ingested(server, stream: str, nbytes: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        st = server.stats()
        if st.bytes_in[stream] >= nbytes and st.connections_open[stream] == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"ingress took in {st.bytes_in[stream]} of {nbytes} bytes of {stream}")
        time.sleep(0.01)


class _Feeder(threading.Thread):
    """Send the files to the ingress, every NBBO file before any order file.

    It runs while Spark starts: the ingress logs the input during the JVM's start-up, and
    the query finds it all in the log.
    """

    def __init__(self, server, host: str, nbbo: list[Path], orders: list[Path], timeout: float):
        super().__init__(name="replay-feeder", daemon=True)
        self.server, self.host, self.timeout = server, host, timeout
        self.streams = ((STREAM_NBBO, nbbo), (STREAM_ORDERS, orders))
        self.error: BaseException | None = None
        self.done_at = 0.0

    def run(self) -> None:
        try:
            for stream, files in self.streams:
                sent = sum(send_acknowledged(self.host, self.server.ports[stream], Path(f)) for f in files)
                _wait_ingested(self.server, stream, sent, self.timeout)
            self.done_at = time.time()
        except BaseException as e:        # handed to the replay's thread by result()
            self.error = e

    def result(self) -> float:
        """Wait until every file is in the log; return when that was (epoch s), or raise."""
        self.join()
        if self.error is not None:
            raise self.error
        return self.done_at


def write_results(out_dir: Path, out: Path) -> int:
    """Write committed results, in arrival order of their orders, to `out`; return count."""
    frames, side = read_committed(out_dir)
    order = np.argsort(side[:, 0], kind="stable")
    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    frames[order].tofile(tmp)
    tmp.replace(out)
    return len(frames)


def replay(nbbo: list[Path], orders: list[Path], out: Path, cfg: Config,
           run_id: str | None = None, keep: bool = False, timeout: float = 3600.0,
           spark=None, ship_metrics: bool | None = None, influx: InfluxConfig | None = None) -> ReplayReport:
    """Replay the files through ingress and the job; write the results to `out`.

    Latency metrics tagged `run=<run_id>` go to InfluxDB (`influx`, which the CLI built)
    when `ship_metrics` is true (the CLI decides: when `MS_INFLUX_URL` is set). A library
    caller giving neither (a test) gets both from this process's `MS_INFLUX_*`.
    """
    if ship_metrics is None:
        ship_metrics = env_is_set("MS_INFLUX_URL")
    if ship_metrics and influx is None:
        influx = InfluxConfig.from_env()
    from engine.spark.job import start_query, stop_query  # lazy: pyspark, pandas; `marketspread results` needs neither
    from marketspread.progress import ConsumedOffsetListener  # lazy: pyspark, as above
    from engine.spark.warmup import warm_workers  # lazy: pyspark, pandas, as above

    # The run id names a folder this replay creates (and later deletes): one safe path
    # component, and never a folder that exists already.
    run_id = check_name(run_id, "run id") if run_id is not None else (
        time.strftime("replay-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    run_dir = cfg.state_dir / "replays" / run_id
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_dir.mkdir()
    except FileExistsError:
        raise ValueError(f"{run_dir} exists already (a kept replay?): pick another --run-id") from None
    rcfg = replace(cfg, state_dir=run_dir, nbbo_port=0, orders_port=0,
                   max_backlog=1 << 62, resume_backlog=1 << 62)
    t0, start_wall = time.monotonic(), time.time()
    server = IngressServer(rcfg)
    shipper = metrics = writer = None
    if ship_metrics:
        writer = open_writer(cfg.state_dir, f"replay-{run_id}", influx)
        metrics = IngressMetrics(run_id, writer, server.stats).start()
        server.on_commit = metrics.on_commit
        shipper = MetricsShipper(rcfg.out_dir, run_id, writer, tasks=rcfg.shards).start()
    server.start()
    feeder = _Feeder(server, rcfg.host, nbbo, orders, timeout)
    ingest_start = time.time()
    feeder.start()
    query = monitor = None
    progress: dict[int, dict] = {}
    try:
        spark = spark or build_session(cfg.master, shards=cfg.shards, ui=cfg.spark_ui, extra=QUICK_START,
                                       checkpoint_batches=cfg.checkpoint_batches)
        session_built = time.time()
        warming = warm_workers(spark, rcfg.max_rows_per_batch, rcfg.shards)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(PROGRESS_KEPT))
        if writer is not None:
            monitor = attach_monitor(spark, run_id, writer, rcfg)
        query = start_query(spark, rcfg, monitor, consumed=ConsumedOffsetListener(str(rcfg.log_dir), None),
                            before_start=lambda: warming.worker.join(WARM_WAIT_S))
        query_started = time.time()
        deadline = time.monotonic() + timeout
        polled = time.monotonic()

        def watch() -> None:
            nonlocal polled
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            if time.monotonic() - polled > PROGRESS_POLL_S:
                # Spark keeps only the last PROGRESS_KEPT reports: collect them as they
                # come, from the first batch on (a long ingest runs many batches).
                progress.update((p["batchId"], p) for p in query.recentProgress)
                polled = time.monotonic()

        while feeder.is_alive():
            watch()
            feeder.join(0.02)
        ingested = feeder.result()
        head = server.stats().head
        while read_consumed(rcfg.log_dir) < head:
            watch()
            if time.monotonic() > deadline:
                raise TimeoutError(f"job consumed {read_consumed(rcfg.log_dir)} of {head} records")
            time.sleep(0.02)
        consumed = time.time()
        progress.update((p["batchId"], p) for p in query.recentProgress)
    finally:
        if query is not None:
            stop_query(spark, query)
        if monitor is not None:
            monitor.stop()
        server.stop()
        if shipper is not None:
            shipper.stop()
            metrics.stop()
            if not writer.close(timeout=60):
                log.warning("replay %s: some metrics could not be written; they stay in %s",
                            run_id, writer.spool_dir)
    st = server.stats()
    n = write_results(rcfg.out_dir, Path(out))
    if st.bad_total and rcfg.deadletter_path.exists():
        shutil.copyfile(rcfg.deadletter_path, Path(str(out) + ".deadletter.jsonl"))
        log.warning("replay %s: %d bad frames set aside in %s.deadletter.jsonl", run_id, st.bad_total, out)
    if not keep:
        if e := try_remove_tree(run_dir):
            log.warning("replay %s: could not remove %s: %s", run_id, run_dir, e)
    moments = ReplayMoments(start_wall, session_built, query_started, ingest_start, ingested, consumed, time.time())
    report = ReplayReport(run_id, st.accepted_total, st.bad_total, n, time.monotonic() - t0, Path(out),
                          writer.stats() if writer is not None else None,
                          replay_timing(moments, batch_spans(list(progress.values()))))
    log.info("replay %s: %d messages accepted, %d bad, %d results in %.1f s -> %s",
             run_id, report.accepted, report.bad, report.results, report.seconds, out)
    return report
