"""A StreamingQueryListener that turns query events into typed records (records.py) and InfluxDB points.

Spark calls a listener on its listener bus (`onQueryStarted` even synchronously, inside
`DataStreamWriter.start()`), so the callbacks only convert the event into a small frozen
record and `put_nowait` it on a bounded queue; a full queue drops the record and counts
it. A consumer thread turns records into points for any writer with `add(points)`:

Every point of a query run carries the tags run, query, `query_id` (Spark's query id,
stable across restarts from one checkpoint) and `run_id` (Spark's runId, one per start);
`runs` has `query_id` as a field, so there only `run_id` is added.

- `spark_progress`: one point per batch, at the batch's trigger start.
  Integer fields: `batch_id`, `events` (sum of endOffset.seq - startOffset.seq),
  `batch_ms`, `<phase>_ms` for each `durationMs` key (`triggerExecution_ms`,
  `addBatch_ms`, ...), `state_rows`, `state_memory_bytes`, `backlog` (latestOffset.seq -
  endOffset.seq), `end_seq`, `input_blocks` (Spark's numInputRows: the source emits
  *blocks* of events, so Spark's row counts are not events), `dropped_records` (by this
  listener, cumulative). Float fields: `input_events_per_s` (events / time since the
  previous trigger start; absent for a run's first batch), `processed_events_per_s`
  (events / batch duration).
- `runs` (tags run, query, run_id): at the query's start `status`="running", `query_id`,
  `spark_run_id`, `start_ns`, `last_seen_ns`; the *same series and time* get
  `last_seen_ns` every `heartbeat_s` while the run is open, and at its end `status`
  (finished, stopped or failed: `records.clean_end_status`, with the reason's `error`,
  `error_class`, `error_message`, `error_trace`: failure.py), `end_ns`, `batches`,
  `events`, so InfluxDB keeps one row per query run (collector/run_status.py). Runs
  still open when the listener is told so (`end_open_runs`) or finds its session gone
  (`SessionHooks.alive`) end stopped, or failed with the reason given.
- `backpressure` (tags run, step="job", query_id, run_id), at most once a second of batch
  time: `busy_share`, `idle_share`, `backlog` (rows behind), `backlog_growth_per_s`,
  Spark's input and processing rates and `overrun_share` over the last 10 s, and `status`
  (`collector.backpressure.query_figures`); with the job adapter's `held_back_share`
  (spark_listener/adapter.py) also `backpressured_share`, which then gives the status.

>>> listener = SparkMetricsListener("run-1", writer).start()
>>> spark.streams.addListener(listener)      # before the query starts: sees its start
>>> ...
>>> listener.wait_terminated(10); spark.streams.removeListener(listener); listener.stop()
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Mapping

from collector.background import lower_thread_priority
from collector.backpressure import STEP_JOB, WINDOW_S, backpressure_point, query_figures
from collector.influx import Point
from collector.run_status import (FIELD_LAST_SEEN_NS, FIELD_STATUS, HEARTBEAT_S, STATUS_FAILED, STATUS_RUNNING,
                                  STATUS_STOPPED)
from collector.vocabulary import RUNS, TAG_QUERY, TAG_QUERY_ID, TAG_RUN, TAG_RUN_ID

from spark_listener.adapter import NO_ADAPTER, JobAdapter
from spark_listener.events import JsonEventsListener
from spark_listener.failure import FailureReason, parse_failure
from spark_listener.points import progress_point, source_points, state_points
from spark_listener.records import (BatchProgress, OpenRunsEnd, QueryEnd, QueryStart, Record, clean_end_status,
                                    parse_timestamp_ns, progress_record)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ListenerOptions:
    """How the listener runs.

    `query_name`: follow only queries of that name; once a start of such a query was
    seen, progress of other runs (late events of an earlier query) is ignored.
    `max_pending`: records queued before the callbacks drop and count (`dropped`).
    `window_s`: the backpressure figures' window; `backpressure_every_s`: at most one
    `backpressure` point per that much batch time (at 25 batches a second, recomputing the
    window for every batch cost the driver ~2 % of a core: docs/PERFORMANCE.md, "Design
    decisions": the listener's consumer). `poll_s`: how often the consumer converts what
    is queued; `heartbeat_s`: how often it rewrites each open run's `last_seen_ns`.
    """
    query_name: str | None = None
    max_pending: int = 10_000
    window_s: float = WINDOW_S
    backpressure_every_s: float = 1.0
    poll_s: float = 0.25
    heartbeat_s: float = HEARTBEAT_S


@dataclass(frozen=True)
class SessionHooks:
    """What the listener asks of the session it follows (the monitor's, spark_listener/monitor.py), each optional.

    `query_info(query_id)`: (trigger ms or None, extra `runs` fields), once per query run,
    from the consumer thread. `batch_points(progress)`: more points for a batch (the task
    latency samples of a committed batch), from the consumer thread. `trigger(query_id)`:
    the query's Spark trigger class name, once per start in the start callback (a few py4j
    calls: the query is registered then and may be gone by the consumer's turn); a run
    under a self-ending trigger that stops without an exception is finished, any other
    stopped. `alive()`: whether the session still runs, asked every heartbeat: a stopped
    session sends no termination events, so its open runs end stopped there.
    """
    query_info: Callable[[str], tuple[int | None, Mapping[str, str]]] | None = None
    batch_points: Callable[[BatchProgress], list[Point]] | None = None
    trigger: Callable[[str], str | None] | None = None
    alive: Callable[[], bool] | None = None


NO_HOOKS = SessionHooks()
DEFAULTS = ListenerOptions()


class _RunState:
    """What the consumer remembers of one query run: its row, its trigger and the last 10 s of batches."""

    def __init__(self, start_ns: int | None, seen_start: bool, tags: dict[str, str] | None = None,
                 query_id: str = "", trigger: str | None = None):
        self.start_ns = start_ns
        self.tags = tags or {}                      # the `runs` row's series
        self.query_id = query_id
        self.trigger = trigger                      # Spark's trigger class, when read at the start
        # Busy share never counts time before the query started; when the listener came
        # late that time is unknown, so the window stays a full one.
        self.floor_ns = start_ns if seen_start else None
        self.recent: deque[BatchProgress] = deque()
        self.batches = 0
        self.events = 0
        self.backpressure_ns: int | None = None      # end of the batch of the last backpressure point
        self.trigger_ms: int | None = None


class SparkMetricsListener(JsonEventsListener):
    """Hand Spark's query events to a writer as `spark_progress`, `runs` and `backpressure` points.

    With `query_name`, only queries of that name are followed; once a start of such a
    query was seen, progress of other runs (late events of an earlier query) is ignored.
    Callbacks never block: a full queue (`max_pending` records) drops and counts
    (`dropped`); an event that fails to convert is counted (`failures`), logged once.
    What it follows and how often it writes: `ListenerOptions`; what it asks of the
    session: `SessionHooks`; what the job adds of itself: `JobAdapter`.
    """

    def __init__(self, run, writer, adapter: JobAdapter = NO_ADAPTER, hooks: SessionHooks = NO_HOOKS,
                 options: ListenerOptions = DEFAULTS):
        """`run`: the run tag of every query, or a function of (query name or None, query id)
        giving each query's. `adapter`: the job's own figures (spark_listener/adapter.py):
        its `latest_offset` and `state_size` are read in the progress callback, its
        `held_back_share` from the consumer thread; its other parts are the monitor's."""
        self.run = run
        self.writer = writer
        self.adapter = adapter
        self.hooks = hooks
        self.options = options
        self.query_name = options.query_name
        self.window_s = options.window_s
        self.backpressure_every_ns = int(options.backpressure_every_s * 1e9)
        self._open: set[str] = set()                # Spark runIds started and not terminated (callbacks)
        self._progress_hooks: list = []
        self.dropped = 0
        self.failures = 0
        self._queue: queue.Queue[Record] = queue.Queue(options.max_pending)
        self._names: dict[str, str] = {}            # Spark runId -> query name (or id)
        self._run_tags: dict[str, str] = {}         # Spark runId -> run tag
        self._prev_ts: dict[str, int] = {}          # Spark runId -> last trigger start
        self._seen_start = False
        self._terminated = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._runs: dict[str, _RunState] = {}       # consumer thread only
        self._ended: set[str] = set()               # runIds ended by `end_open_runs` (consumer thread)
        self._logged_failure = False

    # -- lifecycle

    def start(self) -> "SparkMetricsListener":
        """Start the consumer thread."""
        if self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._consume, name="spark-metrics-listener", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Turn what is queued into points, then stop the consumer thread."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued record was handed to the writer; return whether it was."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    def add_progress_hook(self, hook) -> bool:
        """Also call `hook(progress)` in the callback for each followed query's progress; return True.

        For work that must follow every batch at once (the job's consumed offset), so one
        listener serves both: each Python listener costs a py4j conversion of every event,
        which a profile of the job's driver showed as its main work.
        """
        self._progress_hooks.append(hook)
        return True

    def wait_terminated(self, timeout: float = 10.0) -> bool:
        """Wait for a followed query's termination event (it arrives after its last progress)."""
        return self._terminated.wait(timeout)

    # -- Spark callbacks: convert, enqueue, return

    def onQueryStarted(self, event) -> None:
        try:
            name = event.name or str(event.id)
            if self.query_name is not None and event.name != self.query_name:
                return
            rid = str(event.runId)
            self._names[rid] = name
            self._run_tags[rid] = self._run_of(event.name, event.id)
            self._seen_start = True
            self._terminated.clear()
            self._open.add(rid)
            self._put(QueryStart(self._run_of(event.name, event.id), name, str(event.id), rid,
                                 parse_timestamp_ns(event.timestamp), self._trigger(str(event.id))))
        except Exception:
            self._failed("onQueryStarted")

    def onQueryProgress(self, event) -> None:
        try:
            p = event.progress
            rid = str(p.runId)
            if rid not in self._names:
                if self.query_name is not None and (self._seen_start or p.name != self.query_name):
                    return
                self._names[rid] = p.name or str(p.id)
                self._run_tags[rid] = self._run_of(p.name, p.id)
            for hook in self._progress_hooks:
                hook(p)
            rec = progress_record(self._run_tags.get(rid) or self._run_of(p.name, p.id), p, self._prev_ts.get(rid),
                                  self.adapter.latest_offset, self.adapter.state_size)
            self._prev_ts[rid] = rec.ts_ns
            self._put(rec)
        except Exception:
            self._failed("onQueryProgress")

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        try:
            rid = str(event.runId)
            name = self._names.get(rid)
            if name is None:
                return
            self._prev_ts.pop(rid, None)
            self._open.discard(rid)
            self._put(QueryEnd(self._run_tags.pop(rid, None) or self._run_of(None, event.id), name, str(event.id),
                               rid, time.time_ns(), event.exception))
            self._terminated.set()
        except Exception:
            self._failed("onQueryTerminated")

    def _trigger(self, query_id: str) -> str | None:
        if self.hooks.trigger is None:
            return None
        try:
            return self.hooks.trigger(query_id)
        except Exception:
            self._failed("the trigger hook")
            return None

    @property
    def open_run_ids(self) -> frozenset[str]:
        """Spark runIds of the followed queries started and not yet terminated (as the callbacks saw them)."""
        return frozenset(self._open)

    def end_open_runs(self, reason: FailureReason | None = None, timeout: float = 5.0) -> None:
        """Queue the end of every open run: stopped, or failed with `reason`; `flush` to see it written."""
        self._open.clear()
        try:
            self._queue.put(OpenRunsEnd(time.time_ns(), reason), timeout=timeout)
        except queue.Full:
            self.dropped += 1

    def _run_of(self, name: str | None, query_id) -> str:
        return self.run(name or None, str(query_id)) if callable(self.run) else self.run

    def _put(self, rec: Record) -> None:
        try:
            self._queue.put_nowait(rec)
        except queue.Full:
            self.dropped += 1

    def _failed(self, where: str) -> None:
        self.failures += 1
        if not self._logged_failure:
            self._logged_failure = True
            log.exception("spark listener: %s failed (counted, logged once)", where)

    # -- consumer thread

    def _consume(self) -> None:
        # Every `poll_s`, not on each record: waking this thread for each of 25-50 batches
        # a second (a handover of the GIL each time) was driver CPU for points the writer
        # sends once a second anyway. At a lower CPU priority, as the driver's other metrics
        # threads: it does no batch work (collector/background.py; docs/PERFORMANCE.md,
        # "Metrics threads niced").
        lower_thread_priority()
        beat = time.monotonic()
        while True:
            stopping = self._stopping.wait(self.options.poll_s)
            while self._convert_queued():
                pass
            if stopping:
                return
            if time.monotonic() - beat >= self.options.heartbeat_s:
                beat = time.monotonic()
                self._heartbeat()

    def _heartbeat(self) -> None:
        """Rewrite every open run's `last_seen_ns`; end them all if the session is gone."""
        if not self._runs:
            return
        try:
            alive = self.hooks.alive() if self.hooks.alive is not None else True
        except Exception:
            alive = True
        try:
            if not alive:
                self._open.clear()
                points = self._end_open(OpenRunsEnd(time.time_ns()))
            else:
                now = time.time_ns()
                points = [Point(RUNS, st.tags, {FIELD_LAST_SEEN_NS: now}, st.start_ns)
                          for st in self._runs.values() if st.start_ns is not None and st.tags]
            if points:
                self.writer.add(points)
        except Exception:
            self._failed("the heartbeat")

    def _convert_queued(self) -> int:
        """Turn up to 1000 queued records into points for the writer; return how many."""
        recs = []
        while len(recs) < 1000:
            try:
                recs.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if not recs:
            return 0
        points: list[Point] = []
        for rec in recs:
            try:
                points.extend(self._points(rec))
            except Exception:
                self._failed("turning a record into points")
        try:
            if points:
                self.writer.add(points)
        except Exception:
            self._failed("writer.add")
        finally:
            for _ in recs:
                self._queue.task_done()
        return len(recs)

    def _points(self, rec: Record) -> list[Point]:
        if isinstance(rec, OpenRunsEnd):
            return self._end_open(rec)
        # `runs` has query_id as a field: a tag of the same name would make InfluxDB 1.x's
        # queries ambiguous, so its rows carry run_id alone.
        tags = {TAG_RUN: rec.run, TAG_QUERY: rec.query, TAG_RUN_ID: rec.run_id}
        if isinstance(rec, QueryStart):
            st = self._runs[rec.run_id] = _RunState(rec.start_ns, True, tags, rec.query_id, rec.trigger)
            return [self._start_point(st, rec.run_id)]
        if isinstance(rec, QueryEnd):
            st = self._runs.pop(rec.run_id, None) or _RunState(None, False, tags, rec.query_id)
            reason = parse_failure(rec.error) if rec.error else None
            status = STATUS_FAILED if rec.error else clean_end_status(st.trigger)
            return [self._end_point(st, rec.run_id, rec.end_ns, status, reason)]
        out = []
        st = self._runs.get(rec.run_id)
        if st is None and rec.run_id in self._ended:
            return out                  # a late batch of a run already ended as the monitor stopped
        if st is None:                  # attached after the query started: mark the run from here
            st = self._runs[rec.run_id] = _RunState(rec.ts_ns, False, tags, rec.query_id,
                                                    self._trigger(rec.query_id))
            out.append(self._start_point(st, rec.run_id))
        st.batches += 1
        st.events += rec.events or 0
        st.recent.append(rec)
        horizon = rec.end_ns - int(self.window_s * 1e9)
        while st.recent and st.recent[0].end_ns < horizon:
            st.recent.popleft()
        if st.trigger_ms is None and st.batches == 1 and self.hooks.query_info is not None:
            self._query_info(st, rec.query_id)      # its start came before the query was registered
        # the first batch of a run seen from its start plans the query on a cold JVM: batch rules skip it
        startup = st.floor_ns is not None and st.batches == 1
        out.append(progress_point(rec, self.dropped, st.trigger_ms, startup))
        out.extend(source_points(rec))
        out.extend(state_points(rec))
        if self.hooks.batch_points is not None:
            try:
                out.extend(self.hooks.batch_points(rec))
            except Exception:
                self._failed("the batch hook")
        if st.backpressure_ns is not None and rec.end_ns - st.backpressure_ns < self.backpressure_every_ns:
            return out
        st.backpressure_ns = rec.end_ns
        figures = query_figures(list(st.recent), rec.end_ns, st.trigger_ms, self.window_s, st.floor_ns,
                                self._held_back_share())
        out.append(self._with_ids(backpressure_point(rec.run, STEP_JOB, figures, rec.end_ns), rec))
        return out

    def _held_back_share(self) -> float | None:
        """The job adapter's share of the window its source was held back, when it has one."""
        if self.adapter.held_back_share is None:
            return None
        try:
            return self.adapter.held_back_share(self.window_s)
        except Exception:
            self._failed("the adapter's held_back_share")
            return None

    @staticmethod
    def _with_ids(point: Point, rec: BatchProgress) -> Point:
        return point._replace(tags={**point.tags, TAG_QUERY_ID: rec.query_id, TAG_RUN_ID: rec.run_id})

    def _start_point(self, st: _RunState, run_id: str) -> Point:
        """The `runs` row of a run at its start (or at the first batch seen of it)."""
        return Point(RUNS, st.tags, {FIELD_STATUS: STATUS_RUNNING, "query_id": st.query_id, "spark_run_id": run_id,
                                     "start_ns": st.start_ns, FIELD_LAST_SEEN_NS: time.time_ns(),
                                     **self._query_info(st, st.query_id)}, st.start_ns)

    def _end_point(self, st: _RunState, run_id: str, end_ns: int, status: str,
                   reason: FailureReason | None) -> Point:
        """The `runs` row of a run at its end: the same series and time as its start."""
        fields: dict[str, int | float | str] = {FIELD_STATUS: status, "query_id": st.query_id,
                                                "spark_run_id": run_id, "end_ns": end_ns, "batches": st.batches,
                                                "events": st.events}
        if st.start_ns is not None:
            fields["start_ns"] = st.start_ns
        if st.trigger_ms:
            fields["trigger_ms"] = int(st.trigger_ms)
        if status == STATUS_FAILED and reason is not None:
            fields.update(reason.fields())
        return Point(RUNS, st.tags, fields, st.start_ns if st.start_ns is not None else end_ns)

    def _end_open(self, rec: OpenRunsEnd) -> list[Point]:
        """End every open run: failed with the record's reason, else stopped."""
        status = STATUS_FAILED if rec.reason is not None else STATUS_STOPPED
        runs, self._runs = self._runs, {}
        for run_id in runs:
            self._prev_ts.pop(run_id, None)
        self._ended.update(runs)
        return [self._end_point(st, run_id, rec.end_ns, status, rec.reason) for run_id, st in runs.items()]

    def _query_info(self, st: _RunState, query_id: str) -> dict:
        """Ask the session for a query run's trigger and extra `runs` fields (once per run)."""
        if self.hooks.query_info is None:
            return {}
        try:
            st.trigger_ms, fields = self.hooks.query_info(query_id)
        except Exception:
            self._failed("the query_info hook")
            return {}
        fields = dict(fields)
        if st.trigger_ms:
            fields["trigger_ms"] = int(st.trigger_ms)
        return fields
