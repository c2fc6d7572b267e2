"""The application's executors as its driver sees them: active, lost, and the batches whose tasks failed.

A lost worker takes its executor with it; Spark runs the executor's tasks again elsewhere
and the batch commits once. Neither shows in a query's progress, so `ExecutorWatch`
polls the driver's status store (what Spark's REST API serves as
`/api/v1/applications/<id>/allexecutors` and `/jobs`; read through the JVM gateway, so
it works with Spark's UI off) and writes:

- `spark_executors` (tags run, app), every `every_s`: `active` (executors alive, the driver
  not counted), `lost` (executors removed while the application runs), `failed_tasks`
  (task attempts that failed, on any executor: a lost executor's running tasks count),
  `last_lost` ("<id> on <host:port>: <Spark's remove reason>", empty before any).
- `spark_task_failures` (tags run, query, app), once per batch whose jobs had failed tasks
  (again when the count grows): `batch_id`, `failed_tasks`. The jobs are read only when
  the failed tasks grew or an executor was lost, and for `AFTER_LOSS_POLLS` polls after a
  loss (the batch a lost executor's tasks belonged to ends later, and Spark may count those
  tasks on no executor once the executor is gone), so a healthy application costs one small
  call per poll.

Like the listener, the watch never fails the job: a poll that raises is logged (once per
kind of error) and the next one runs. A stopped SparkContext ends the watch quietly: its
status store is gone with it, and a job's normal `spark.stop()` is nothing to warn of.

>>> watch = ExecutorWatch(spark.sparkContext, "run-1", writer).start()
>>> ...
>>> watch.stop()
"""
from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Iterable

from collector.background import lower_thread_priority
from collector.influx import Point
from collector.vocabulary import SPARK_EXECUTORS, SPARK_TASK_FAILURES, TAG_APP, TAG_QUERY, TAG_RUN

log = logging.getLogger(__name__)

DRIVER = "driver"
AFTER_LOSS_POLLS = 10
_BATCH = re.compile(r"^batch = (\d+)$", re.M)


@dataclass(frozen=True)
class ExecutorState:
    """One executor in the status store."""
    id: str
    host_port: str
    active: bool
    remove_reason: str
    failed_tasks: int


@dataclass(frozen=True)
class JobFailures:
    """One Spark job's description (a streaming query sets it per batch) and its failed tasks."""
    description: str
    failed_tasks: int


@dataclass(frozen=True)
class ExecutorsSummary:
    """The application's executors at one poll."""
    active: int
    lost: int
    failed_tasks: int
    last_lost: str


def summarize(executors: Iterable[ExecutorState]) -> ExecutorsSummary:
    """Count active and lost executors and failed tasks (the driver is no executor)."""
    active = lost = failed = 0
    last = ""
    for e in executors:
        failed += e.failed_tasks
        if e.id == DRIVER:
            continue
        if e.active:
            active += 1
        else:
            lost += 1
            last = f"{e.id} on {e.host_port}: {e.remove_reason or 'removed'}"
    return ExecutorsSummary(active, lost, failed, last)


def batch_failures(jobs: Iterable[JobFailures]) -> dict[tuple[str, int], int]:
    """Return failed tasks per (query name, batch id), from the jobs' streaming descriptions."""
    out: dict[tuple[str, int], int] = {}
    for j in jobs:
        m = _BATCH.search(j.description)
        if m is None or j.failed_tasks <= 0:
            continue
        key = (j.description.split("\n", 1)[0].strip(), int(m.group(1)))
        out[key] = out.get(key, 0) + j.failed_tasks
    return out


def _option(value) -> str:
    """A Scala Option[String] through py4j as text ("" for None)."""
    return str(value.get()) if value is not None and value.isDefined() else ""


def read_executors(store) -> list[ExecutorState]:
    """Read every executor, alive or removed, from the driver's AppStatusStore (a py4j object)."""
    seq = store.executorList(False)
    out = []
    for i in range(seq.size()):
        e = seq.apply(i)
        out.append(ExecutorState(str(e.id()), str(e.hostPort()), bool(e.isActive()), _option(e.removeReason()),
                                 int(e.failedTasks())))
    return out


def read_jobs(store) -> list[JobFailures]:
    """Read the retained jobs' descriptions and failed task counts from the AppStatusStore."""
    seq = store.jobsList(None)
    return [JobFailures(_option(j.description()), int(j.numFailedTasks()))
            for j in (seq.apply(i) for i in range(seq.size()))]


class ExecutorWatch:
    """A daemon thread writing the application's executors and failed tasks through `writer.add`."""

    def __init__(self, spark_context, run: str, writer, every_s: float = 2.0):
        self.sc = spark_context
        self.run = run
        self.writer = writer
        self.every_s = every_s
        self.app = str(spark_context.applicationId)
        self.polls = 0
        self.failures = 0
        self._failed_seen = 0
        self._lost_seen = 0
        self._jobs_polls = 0                    # polls left that read the jobs
        self._batches: dict[tuple[str, int], int] = {}
        self._errors_logged: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="executor-watch", daemon=True)

    def start(self) -> "ExecutorWatch":
        self._thread.start()
        return self

    def poll(self) -> list[Point]:
        """Read the status store once; return the points of this poll."""
        store = self.sc._jsc.sc().statusStore()
        summary = summarize(read_executors(store))
        now = time.time_ns()
        if summary.lost > self._lost_seen:
            self._jobs_polls = AFTER_LOSS_POLLS
        elif summary.failed_tasks > self._failed_seen:
            self._jobs_polls = max(self._jobs_polls, 1)
        self._failed_seen, self._lost_seen = summary.failed_tasks, summary.lost
        points = []
        if self._jobs_polls > 0:
            self._jobs_polls -= 1
            for (query, batch), n in sorted(batch_failures(read_jobs(store)).items()):
                if self._batches.get((query, batch), 0) < n:
                    self._batches[(query, batch)] = n
                    points.append(Point(SPARK_TASK_FAILURES, {TAG_RUN: self.run, TAG_QUERY: query, TAG_APP: self.app},
                                        {"batch_id": batch, "failed_tasks": n}, now))
                    log.warning("batch %d of %s: %d failed tasks, run again (executors: %d active, %d lost; "
                                "last lost %s)", batch, query, n, summary.active, summary.lost, summary.last_lost)
        # a task lost with its executor may be counted on no executor: the batches' count is the floor
        failed = max(summary.failed_tasks, sum(self._batches.values()))
        return [Point(SPARK_EXECUTORS, {TAG_RUN: self.run, TAG_APP: self.app},
                      {"active": summary.active, "lost": summary.lost, "failed_tasks": failed,
                       "last_lost": summary.last_lost}, now), *points]

    def _run(self) -> None:
        lower_thread_priority()             # a metrics thread: gives way to the batches
        while not self._stop.wait(self.every_s):
            self._tick()

    def _stopped(self) -> bool:
        """Whether the SparkContext was stopped (PySpark drops its Java context then)."""
        return getattr(self.sc, "_jsc", None) is None

    def _tick(self) -> None:
        if self._stopped():
            self._stop.set()
            return
        try:
            points = self.poll()
            self.polls += 1
            self.writer.add(points)
        except Exception as e:                  # never the job's failure; said once per kind
            if self._stopped():                 # stopped during the poll
                self._stop.set()
                return
            self.failures += 1
            kind = type(e).__name__
            if kind not in self._errors_logged:
                self._errors_logged.add(kind)
                log.warning("executor watch: a poll failed (%s: %s); polling on", kind, str(e)[:300])

    def stop(self) -> None:
        """Stop polling after one last poll (while the application still runs)."""
        self._stop.set()
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._tick()
