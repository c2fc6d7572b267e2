"""Attach the product to any PySpark session in two lines: every streaming query gets its figures.

>>> from spark_listener import monitor
>>> with monitor(spark, name="orders-enrichment"):
...     query = df.writeStream.queryName("orders").start()
...     query.awaitTermination()

`monitor()` registers one `SparkMetricsListener` for every streaming query of the session
(`spark_progress`, `spark_source`, `spark_state`, `runs`, `backpressure` points), ships
the latency samples the query's tasks recorded (`record_latency`, `timed_step`) once
Spark reports their batch done, and, when the session was built with
`executor_metrics_conf()`, relays Spark's own metrics system (executors' JVM heap, GC,
CPU, tasks, shuffle) into the `spark_executor` measurement. Everything goes through one
never-blocking writer to `MS_INFLUX_URL` (the settings layer, docs/METRICS.md); nothing
the monitor does can fail the user's job: a failure is counted and logged once.
`marketspread watch -- job.py` does the same for a script that never imports this.

A job whose source or state lives outside Spark adds what Spark's progress cannot say
through a `JobAdapter` (spark_listener/adapter.py: its run tag, rows behind, held-back
share, state size, steps); Market Spread attaches so (marketspread/metrics_wiring.py).
The monitor itself knows no job by name.

No run is left `running` for ever: when the monitor stops (`stop()`, the context manager,
the session's `stop()`, the interpreter's exit) every run it saw start and not end gets
its end, stopped, or failed with the reason `stop(failure)` is given.

The monitor also takes part in evaluating the state folder's alert rules (`alerts.service`:
one evaluator per rules namespace at a time across every process of the product, by a
lease), so a rule is evaluated while the job runs even with no dashboard up;
`monitor(spark, alerts=False)` leaves that to other processes.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import traceback
import time
import warnings
from pathlib import Path

from collector.aggregate import IntervalAggregator
from collector.graphite_relay import GraphiteRelay
from collector.influx import InfluxClient, InfluxConfig, InfluxWriter, Point
from collector.names import to_name
from collector.points import latency_point
from collector.settings import default_state_dir
from collector.task_spool import SpoolBatch, collect_batch_figures, collect_unbatched, default_spool_dir, sweep
from collector.vocabulary import LATENCY_UNCOUNTED, TAG_PIPELINE, TAG_RUN, TAG_STEP

from spark_listener.adapter import NO_ADAPTER, JobAdapter
from spark_listener.executors import ExecutorWatch
from spark_listener.failure import FailureReason, parse_failure
from spark_listener.latency import declared_steps
from spark_listener.listener import SessionHooks, SparkMetricsListener
from spark_listener.records import BatchProgress

log = logging.getLogger(__name__)

GRAPHITE_PORT_KEY = "spark.metrics.conf.*.sink.graphite.port"
GRAPHITE_HOST_KEY = "spark.metrics.conf.*.sink.graphite.host"
#: How long `stop()` waits for the termination events of queries that ended before it (Spark posts them async).
TERMINATION_WAIT_S = 3.0
#: Batch folders of task samples older than this, never reported done (a failed query), are removed.
SPOOL_SWEEP_S = 3600.0
#: The pipeline tag of samples recorded by tasks outside any streaming query (a batch job).
UNBATCHED_PIPELINE = "batch"


#: Relays started before their session (executor_metrics_conf), by port: the monitor adopts its own.
_early_relays: dict[int, tuple[GraphiteRelay, object]] = {}
_early_lock = threading.Lock()


def _open_writer(state_dir: Path, name: str, influx: InfluxConfig | None) -> InfluxWriter:
    """Start a never-blocking writer to `influx` (None: `MS_INFLUX_*`'s), spooling under the state folder."""
    cfg = influx if influx is not None else InfluxConfig.from_env()     # the user's job gave none
    spool = state_dir / "metrics-spool" / f"monitor-{to_name(name, 'app')}"
    writer = InfluxWriter(InfluxClient(cfg), spool, background=True, interval=cfg.flush_s).start()
    log.info("monitor: %s -> %s database %s", name, cfg.url, cfg.db)
    return writer


def _start_alerts(influx: InfluxConfig | None, state_dir: Path, writer):
    """Start this process' alert evaluator (settings from the environment: a user's job has no others)."""
    from alerts.service import start_alerts  # lazy: Spark's Python workers import this package (the recorders)
    from alerts.settings import AlertSettings  # lazy: as above
    return start_alerts(influx if influx is not None else InfluxConfig.from_env(),
                        AlertSettings.from_env(state_dir=state_dir), state_dir, sink=writer)


def executor_metrics_conf(host: str = "127.0.0.1", period_s: int = 2, *, writer=None,
                          state_dir: Path | None = None, influx: InfluxConfig | None = None) -> dict[str, str]:
    """Start a relay for Spark's metrics system now; return the Spark properties that send to it.

    Spark starts its metrics sinks with the SparkContext, so the properties go into the
    builder (`SparkSession.builder.config(map=executor_metrics_conf())`) and the relay
    listens before the session exists (no report is refused). `monitor()` adopts it. On
    a cluster, `host` is the driver's address the executors reach. The properties carry
    the relay's secret prefix: it relays this session's reports and no one else's.
    """
    _check_relay_host(host)
    own = writer is None
    if own:
        writer = _open_writer(Path(state_dir) if state_dir else default_state_dir(), f"relay-{os.getpid()}", influx)
    try:
        relay = GraphiteRelay(writer, host=host, port=0).start()
    except BaseException:
        if own:
            writer.close(1.0)
        raise
    with _early_lock:
        _early_relays[relay.port] = (relay, writer if own else None)
    return relay.spark_conf(host, period_s)


def _check_relay_host(host: object) -> str:
    """Return `host` if it can be the relay's address (a host name or IP, no spaces); else raise ValueError."""
    if not isinstance(host, str) or not host or len(host) > 253 or any(c.isspace() or c in "/\\\"'" for c in host):
        raise ValueError(f"metrics host {host!r} is not a host name or address")
    return host


class SparkMonitor:
    """The monitor of one Spark session: its listener, task-sample shipping, executor relay and writer.

    `name`: the run tag of queries without a name, and of the application's executors
    (default: the application's name); a named query is a run of its own name, unless the
    adapter gives every query's run. `adapter`: what the job adds of itself (`JobAdapter`).
    `writer`: any object with `add(points)` (default: an `InfluxWriter` to the
    configured InfluxDB, spooling under the state folder, closed by `stop()`).
    `run`: the former name of `name`, still taken.
    """

    def __init__(self, spark, name: str | None = None, *, adapter: JobAdapter = NO_ADAPTER, writer=None,
                 influx: InfluxConfig | None = None, state_dir: Path | None = None, spool_dir: Path | None = None,
                 interval_s: float = 1.0, alerts: bool = True, run: str | None = None):
        if run is not None:
            warnings.warn("monitor(run=...) is now monitor(name=...)", DeprecationWarning, stacklevel=3)
            name = name or run
        self.spark = spark
        sc = spark.sparkContext
        self.app_id, self.app_name = str(sc.applicationId), str(sc.appName)
        self.adapter = adapter
        self.name = to_name(adapter.run or name or self.app_name, "spark-app")
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.spool_dir = Path(spool_dir) if spool_dir else default_spool_dir()
        self.interval_s = interval_s
        self._influx = influx
        self._writer = writer
        self._own_writer = writer is None
        self._listener: SparkMetricsListener | None = None
        self._relay: GraphiteRelay | None = None
        self._relay_writer = None                      # an adopted relay's own writer, closed with it
        self._executors: ExecutorWatch | None = None   # the application's executors, lost ones too
        self._aggregators: dict[tuple[str, str], IntervalAggregator] = {}   # (run, query) -> intervals
        self._lock = threading.Lock()
        self._triggers: dict[str, tuple[str | None, int | None]] = {}   # query id -> (trigger class, ms)
        self._context_stop = None                         # the wrapper on the SparkContext's stop, while there
        self.unreadable = 0                               # task sample files or lines skipped
        self._evaluate = alerts
        self._alerts = None                               # this process' alert evaluator (alerts.service)

    # -- lifecycle

    def start(self) -> "SparkMonitor":
        """Register the listener (every query started from now on, and those running) and start shipping.

        A monitor that cannot start (a bad setting, an unwritable state folder) says why in
        one line and stays off: the user's job runs on unmonitored, never fails for it.
        """
        if self._listener is not None:
            return self
        try:
            return self._start()
        except Exception as e:
            log.error("monitor: not attached to %s: %s", self.app_id, e)
            self.stop()
            return self

    def _start(self) -> "SparkMonitor":
        if self._writer is None:
            self._writer = _open_writer(self.state_dir, self.app_id, self._influx)
        self._start_relay()
        try:
            removed = sweep(self.spool_dir, SPOOL_SWEEP_S)
            if removed:
                log.info("monitor: removed %d batch folders of task samples never reported done", removed)
        except OSError as e:
            log.warning("monitor: could not sweep %s: %s", self.spool_dir, e)
        sc = self.spark.sparkContext
        hooks = SessionHooks(query_info=self._query_info, batch_points=self._batch_points,
                             trigger=self._trigger_kind, alive=lambda: _alive(sc))
        self._listener = SparkMetricsListener(self._run_tag, self._writer, self.adapter, hooks).start()
        self.spark.streams.addListener(self._listener)
        self._executors = ExecutorWatch(sc, self.name, self._writer).start()
        if self._evaluate:        # rules are evaluated while any monitored job runs: one process at a time
            self._alerts = _start_alerts(self._influx, self.state_dir, self._writer)
        self._stop_with_context(sc)
        atexit.register(self.stop)
        return self

    def _stop_with_context(self, sc) -> None:
        """Stop the monitor first when its SparkContext stops (`spark.stop()` calls `sc.stop()`).

        A stopped session sends no termination events and its status store is gone, so the
        monitor ends its open runs and takes its last figures while the context still runs
        (stopped while an exception unwinds the job, a `finally:` block, they end failed with
        it); the relay hears Spark's last metrics report as the context stops, then closes.
        Wrapped on this SparkContext object alone; `stop()` puts its own method back.
        """
        original = sc.stop
        previous = vars(sc).get("stop")             # another monitor's wrapper, if any

        def stop(*args, **kwargs):
            try:
                self._detach(10.0, failure_of(sys.exc_info()[1]))
            except Exception:
                log.exception("monitor: stopping with the session failed")
            try:
                return original(*args, **kwargs)
            finally:
                self.stop()

        try:
            sc.stop = stop
            self._context_stop = (stop, previous)
        except (AttributeError, TypeError):
            pass

    def stop(self, timeout: float = 10.0, failure: FailureReason | None = None) -> None:
        """End the runs still open, convert what is queued, write the last intervals, stop the relay, close the writer.

        `failure`: the reason the job itself failed (the script's exception): its open runs
        end failed with it; without it they end stopped.
        """
        self._detach(timeout, failure)
        alerts, self._alerts = self._alerts, None
        if alerts is not None:
            alerts.stop(timeout)
        if self._relay is not None:
            self._relay.stop()
            self._relay = None
        if self._relay_writer is not None:
            self._relay_writer.close(timeout)
            self._relay_writer = None
        if self._own_writer and self._writer is not None:
            self._writer.close(timeout)
            self._writer = None

    def _detach(self, timeout: float, failure: FailureReason | None) -> None:
        """Leave the session: end its open runs, write what is queued and the last intervals."""
        atexit.unregister(self.stop)
        sc = self.spark.sparkContext
        if self._context_stop is not None:
            wrapper, previous = self._context_stop
            if vars(sc).get("stop") is wrapper:             # not wrapped again since
                if previous is None:
                    del sc.stop                             # the context's own method again
                else:
                    sc.stop = previous
            self._context_stop = None
        executors, self._executors = self._executors, None
        if executors is not None:
            executors.stop()
        listener, self._listener = self._listener, None
        if listener is not None:
            self._await_terminations(listener, timeout)
            try:
                self.spark.streams.removeListener(listener)
            except Exception:               # the session was stopped first: its listeners went with it
                pass
            listener.end_open_runs(failure)
            listener.flush(timeout)
            listener.stop(timeout)
        points = self._unbatched_points(final=True)
        with self._lock:
            points += [latency_point(ih) for agg in self._aggregators.values() for ih in agg.drain(time.time_ns(), True)]
        if points and self._writer is not None:
            self._writer.add(points)

    def __enter__(self) -> "SparkMonitor":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(failure=failure_of(exc))

    @property
    def listener(self) -> SparkMetricsListener | None:
        """The session's listener (its `dropped` and `failures` counters), while started."""
        return self._listener

    @property
    def run(self) -> str:
        """The former name of `name`."""
        return self.name

    def add_progress_hook(self, hook) -> bool:
        """Also call `hook(progress)` in the listener's callback for each batch; return whether it will be.

        (`SparkMetricsListener.add_progress_hook`.) False when the monitor is not attached
        (it could not start): the caller follows the batches some other way.
        """
        return self._listener is not None and self._listener.add_progress_hook(hook)

    def _await_terminations(self, listener: SparkMetricsListener, timeout: float) -> None:
        """Wait briefly for the termination events of queries that ended but whose event is still on its way.

        A script that raises from `awaitTermination()` gets here before Spark's listener
        bus delivered the query's own end, which has the better reason.
        """
        deadline = time.monotonic() + min(timeout, TERMINATION_WAIT_S)
        while listener.open_run_ids and time.monotonic() < deadline:
            try:
                active = {str(q.runId) for q in self.spark.streams.active}
            except Exception:               # the session is gone: no event will come
                return
            if listener.open_run_ids <= active:
                return
            time.sleep(0.05)
        listener.flush(max(0.0, deadline - time.monotonic()))

    # -- what the listener asks

    def _run_tag(self, name: str | None, query_id: str) -> str:
        if self.adapter.run:
            return self.name
        return to_name(name, self.name) if name else self.name

    def _trigger_kind(self, query_id: str) -> str | None:
        """Return the query's trigger class (from its start callback, where the query is registered)."""
        self._triggers[query_id] = trigger = _query_trigger(self.spark, query_id)
        return trigger[0]

    def _query_info(self, query_id: str) -> tuple[int | None, dict]:
        """Return the query's processing-time trigger (ms) and the `runs` fields of this session."""
        fields: dict[str, str] = {"app_id": self.app_id, "app_name": self.app_name[:200]}
        steps = list(self.adapter.steps) or declared_steps()
        if steps:
            fields["steps"] = json.dumps(steps)
        fields.update(self.adapter.run_fields)
        known = self._triggers.get(query_id)
        return (known[1] if known is not None else _query_trigger(self.spark, query_id)[1]), fields

    def _batch_points(self, rec: BatchProgress) -> list[Point]:
        """Ship the latency samples the tasks of a reported (committed) batch recorded.

        Rows a step saw but could not time (null or future stamps) become a
        `latency_uncounted` point of the batch, so a bad timestamp column shows rather than
        vanishes; unreadable sample files are counted in `unreadable`. The samples of tasks
        outside any streaming query (a batch job's `record_latency`) go along, at least once.
        """
        if not self.spool_dir.is_dir():       # no task recorded a sample yet (Market Spread's never do): one stat
            return []
        batch = collect_batch_figures(self.spool_dir, rec.query_id, rec.batch_id)
        return self._points(rec.run, rec.query, batch, rec.end_ns) + self._unbatched_points()

    def _unbatched_points(self, final: bool = False) -> list[Point]:
        """Ship the samples of tasks outside any streaming query, under their own run, pipeline `batch`."""
        try:
            found = collect_unbatched(self.spool_dir)
        except OSError as e:
            log.warning("monitor: could not read %s: %s", self.spool_dir, e)
            return []
        now = time.time_ns()
        return [p for run, batch in found.items() if run
                for p in self._points(to_name(run, self.name), UNBATCHED_PIPELINE, batch, now, final)]

    def _points(self, run: str, query: str, batch: SpoolBatch, end_ns: int, final: bool = False) -> list[Point]:
        """Add a batch's samples to the (run, query) intervals; return the uncounted points and closed intervals."""
        samples = batch.samples
        self.unreadable += batch.unreadable
        out = [Point(LATENCY_UNCOUNTED, {TAG_RUN: run, TAG_PIPELINE: query, TAG_STEP: u.step},
                     {"nulls": int(u.nulls), "negative": int(u.negative)}, end_ns)
               for u in batch.uncounted.values() if u.nulls or u.negative]
        with self._lock:
            agg = self._aggregators.get((run, query))
            if agg is None and not samples:
                return out
            if agg is None:
                agg = self._aggregators[(run, query)] = IntervalAggregator(run, self.interval_s)
            for s in samples:
                agg.add(s.__class__(query, s.step, s.worker, s.ts_ns, s.counts))
            return out + [latency_point(ih) for ih in agg.drain(time.time_ns(), final)]

    # -- Spark's metrics system

    def _start_relay(self) -> None:
        """Relay Spark's metrics sink into the writer when the session was built to send them here."""
        conf = self.spark.sparkContext.getConf()
        port, host = conf.get(GRAPHITE_PORT_KEY, None), conf.get(GRAPHITE_HOST_KEY, "127.0.0.1")
        if not port:
            log.info("monitor: no executor heap, GC or CPU figures: Spark starts its metrics sink with the "
                     "SparkContext; build the session with SparkSession.builder.config("
                     "map=executor_metrics_conf()) (from spark_listener) to get them")
            return
        try:
            with _early_lock:
                early = _early_relays.pop(int(port), None)
        except ValueError:
            early = None
        if early is None:
            # The script's own sink: it sends where the script says (starting a relay now, after
            # the SparkContext, would miss its first reports, and it carries no secret of ours).
            log.info("monitor: the session's own Graphite sink (%s:%s) is left to the script; executor figures "
                     "reach the monitor only from a session built with executor_metrics_conf()", host, port)
            return
        self._relay, self._relay_writer = early


def failure_of(exc: BaseException | None) -> FailureReason | None:
    """The reason a job failed with `exc`; None for none, or for a stop asked for (SystemExit, Ctrl-C)."""
    if exc is None or isinstance(exc, (SystemExit, KeyboardInterrupt, GeneratorExit)):
        return None
    return parse_failure("".join(traceback.format_exception(exc)))


def _alive(sc) -> bool:
    """Whether a SparkContext still runs (PySpark drops its Java context on `stop()`)."""
    return getattr(sc, "_jsc", None) is not None


def _query_trigger(spark, query_id: str) -> tuple[str | None, int | None]:
    """Return a query's trigger class (`ProcessingTimeTrigger`, `AvailableNowTrigger$`, ...) and interval ms.

    The interval is None for no processing-time trigger or a zero one (back to back);
    both are None when unknown (the query is gone, Spark Connect, another version).
    """
    try:
        q = spark.streams.get(query_id)
        if q is None:
            return None, None
        trigger = q._jsq.streamingQuery().trigger()
        kind = str(trigger.getClass().getSimpleName())
        if kind != "ProcessingTimeTrigger":
            return kind, None
        ms = int(trigger.intervalMs())
        return kind, (ms if ms > 0 else None)
    except Exception:                   # a query of Spark Connect or of a version without these
        return None, None


def close_unused_relays(timeout: float = 5.0) -> None:
    """Stop relays `executor_metrics_conf` started that no monitor adopted (no session was built)."""
    with _early_lock:
        early = list(_early_relays.values())
        _early_relays.clear()
    for relay, writer in early:
        relay.stop()
        if writer is not None:
            writer.close(timeout)


def monitor(spark, name: str | None = None, **kwargs) -> SparkMonitor:
    """Start monitoring every streaming query of `spark`; return the monitor (also a context manager).

    `name`: the run tag of unnamed queries (default: the application's name); the other
    keywords are `SparkMonitor`'s (`adapter`, `writer`, `alerts`, ...).
    """
    return SparkMonitor(spark, name, **kwargs).start()
