"""The catalogue of figures: each figure the monitor writes, reads, charts and alerts on (pure).

One entry per figure: its name (what alert conditions and pages call it), its unit, where
it comes from (a query's progress, one of its sources' or stateful operators' progress,
Spark's metrics system on each executor, the driver's status store, a step's latency
histograms, the backpressure figures computed from progress), the measurement and field
it is written to at each level it has, its default aggregate over a window and its label.
Writers take field names from the `FIELD_*` constants here, the read side and the alerts
select by the figures, pages label by them; `tests/test_architecture.py` fails on a Spark
field name typed outside this module. Measurement and tag names are `collector.vocabulary`'s.

Example::

    from collector.catalogue import FIGURES, QUERY

    field, scale = FIGURES["watermark_delay"].fields[QUERY]     # ("watermark_delay_ms", 1e6): ms to ns
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, NamedTuple

from collector.vocabulary import (BACKPRESSURE, FIELD_BATCH_ID, FIELD_COUNT, FIELD_HDR, LATENCY, SPARK_EXECUTOR,
                                  SPARK_EXECUTORS, SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE, SPARK_TASK_FAILURES,
                                  STEP_JOB, TAG_APP, TAG_EXECUTOR, TAG_OPERATOR, TAG_QUERY, TAG_RUN, TAG_SOURCE,
                                  TAG_STEP)

# -- units: what a figure's value is, in its base unit ----------------------------------------
DURATION, RATE, ROWS, BYTES, SHARE, COUNT = "duration", "rate", "rows", "bytes", "share", "count"  # ns, /s, ...

# -- where a figure comes from ---------------------------------------------------------------
PROGRESS = "progress"                   # StreamingQueryProgress, one per micro-batch
SOURCE_PROGRESS = "source progress"     # its SourceProgress entries
OPERATOR_PROGRESS = "operator progress"  # its StateOperatorProgress entries
EXECUTOR_SOURCE = "executor source"     # Spark's metrics system (JvmSource, ExecutorSource) via the Graphite relay
STATUS_STORE = "status store"           # the driver's AppStatusStore, polled (spark_listener.executors)
STEP = "step"                           # a step's latency histograms (record_latency, timed_step, Market Spread)
BACKPRESSURE_FIGURES = "backpressure figures"   # collector.backpressure, from progress or the ingress

# -- levels: where one series of a figure is written ------------------------------------------
QUERY, SOURCE, OPERATOR, EXECUTOR, APPLICATION = "query", "source", "operator", "executor", "application"
STEPS, JOB, BATCH_FAILURES = "step", "job", "batch failures"


class Level(NamedTuple):
    """A measurement, the tags that tell its series apart, and tag values every read fixes."""
    measurement: str
    tags: tuple[str, ...]
    where: tuple[tuple[str, str], ...] = ()


LEVELS: Mapping[str, Level] = {
    QUERY: Level(SPARK_PROGRESS, (TAG_RUN, TAG_QUERY)),
    SOURCE: Level(SPARK_SOURCE, (TAG_RUN, TAG_QUERY, TAG_SOURCE)),
    OPERATOR: Level(SPARK_STATE, (TAG_RUN, TAG_QUERY, TAG_OPERATOR)),
    EXECUTOR: Level(SPARK_EXECUTOR, (TAG_APP, TAG_EXECUTOR)),
    APPLICATION: Level(SPARK_EXECUTORS, (TAG_RUN, TAG_APP)),
    BATCH_FAILURES: Level(SPARK_TASK_FAILURES, (TAG_RUN, TAG_QUERY, TAG_APP)),
    STEPS: Level(LATENCY, ()),                          # a scope's intervals merge into one histogram
    JOB: Level(BACKPRESSURE, (TAG_RUN,), ((TAG_STEP, STEP_JOB),)),
}

# -- aggregates over a window (besides mean, max, min, last, sum and p50..p99.99) --------------
INCREASE = "increase"           # a cumulative counter's growth over the window
AGE = "age"                     # time since the newest point, read as it stands now
PER_SECOND = "per_second"       # the window's sum over its length (a step's events/s)
AGGREGATES = ("mean", "max", "min", "last", "sum")

# -- fields: spark_progress (a query's micro-batch) -------------------------------------------
FIELD_BATCH_MS = "batch_ms"
FIELD_INPUT_BLOCKS = "input_blocks"             # Spark's numInputRows, as Market Spread names it
FIELD_INPUT_ROWS = "input_rows"
FIELD_DROPPED_RECORDS = "dropped_records"
FIELD_EVENTS = "events"
FIELD_STATE_ROWS = "state_rows"
FIELD_STATE_MEMORY_BYTES = "state_memory_bytes"
FIELD_BACKLOG = "backlog"
FIELD_END_SEQ = "end_seq"
FIELD_LATE_ROWS = "late_rows"
FIELD_ROWS_BEHIND = "rows_behind"
FIELD_WATERMARK_NS = "watermark_ns"
FIELD_WATERMARK_DELAY_MS = "watermark_delay_ms"
FIELD_INPUT_EVENTS_PER_S = "input_events_per_s"
FIELD_PROCESSED_EVENTS_PER_S = "processed_events_per_s"
FIELD_INPUT_ROWS_PER_S = "input_rows_per_s"
FIELD_PROCESSED_ROWS_PER_S = "processed_rows_per_s"
FIELD_TRIGGER_MS = "trigger_ms"
FIELD_OVERRAN = "overran"
#: Spark's durationMs phases; each is written as `<phase>_ms` (`phase_field`).
PHASES = ("triggerExecution", "queryPlanning", "getBatch", "latestOffset", "addBatch", "walCommit", "commitOffsets",
          "setOffsetRange", "getOffset", "getEndOffset")
# -- spark_source ------------------------------------------------------------------------------
FIELD_FILES_BEHIND = "files_behind"
# -- spark_state -------------------------------------------------------------------------------
FIELD_ROWS_TOTAL = "rows_total"
FIELD_ROWS_UPDATED = "rows_updated"
FIELD_ROWS_REMOVED = "rows_removed"
FIELD_MEMORY_BYTES = "memory_bytes"
# -- spark_executor (Spark's metrics system) ---------------------------------------------------
FIELD_HEAP_USED_BYTES = "heap_used_bytes"
FIELD_HEAP_MAX_BYTES = "heap_max_bytes"
FIELD_HEAP_COMMITTED_BYTES = "heap_committed_bytes"
FIELD_NON_HEAP_USED_BYTES = "non_heap_used_bytes"
FIELD_JVM_CPU_TIME_NS = "jvm_cpu_time_ns"
FIELD_CPU_TIME_NS = "cpu_time_ns"
FIELD_RUNNING_TASKS = "running_tasks"
FIELD_COMPLETED_TASKS = "completed_tasks"
FIELD_SHUFFLE_READ_BYTES = "shuffle_read_bytes"
FIELD_SHUFFLE_WRITE_BYTES = "shuffle_write_bytes"
FIELD_MEMORY_SPILLED_BYTES = "memory_spilled_bytes"
FIELD_DISK_SPILLED_BYTES = "disk_spilled_bytes"
FIELD_GC_TIME_MS = "gc_time_ms"
FIELD_GC_COUNT = "gc_count"
# -- spark_executors, spark_task_failures (the driver's status store) --------------------------
FIELD_ACTIVE = "active"
FIELD_LOST = "lost"
FIELD_FAILED_TASKS = "failed_tasks"
FIELD_LAST_LOST = "last_lost"
# -- backpressure ------------------------------------------------------------------------------
FIELD_BP_STATUS = "status"
FIELD_BUSY_SHARE = "busy_share"
FIELD_BACKPRESSURED_SHARE = "backpressured_share"
FIELD_IDLE_SHARE = "idle_share"
FIELD_BACKLOG_GROWTH_PER_S = "backlog_growth_per_s"
FIELD_OVERRUN_SHARE = "overrun_share"

_MS = 1e6                       # a field in ms, in ns


def phase_field(phase: str) -> str:
    """Return the `spark_progress` field of a durationMs phase (`addBatch` -> `addBatch_ms`)."""
    return f"{phase}_ms"


@dataclass(frozen=True)
class Figure:
    """One figure: its unit, origin and, per level, the field it is written to (with its scale to base units).

    `condition` says how an alert condition names it: GENERIC (`[agg(]name[)] op threshold`),
    OWN (its own grammar: `p99 > 5ms`, `throughput < 10k/s`, `backlog > 1M`,
    `backpressure > 50%`) or None (pages only). `steady`: read without each run's start-up
    batch (planning, a cold JVM). `settles`: its points are written once their interval
    closed, a few seconds late, so a window read ends that much before now.
    """
    name: str
    unit: str
    origin: str
    spark: str                                     # what Spark (or the step) calls it
    fields: Mapping[str, tuple[str, float]]        # level -> (field, scale to base units)
    aggregate: str = "mean"
    label: str = ""
    about: str = ""
    steady: bool = False
    settles: bool = False
    condition: str | None = None

    @property
    def levels(self) -> tuple[str, ...]:
        """Return the levels this figure is written at, the default first."""
        return tuple(self.fields)

    def field(self, level: str | None = None) -> str:
        """Return the field the figure is written to at `level` (default: its first level)."""
        return self.fields[level or self.levels[0]][0]


GENERIC, OWN = "generic", "own"


def _f(name, unit, origin, spark, fields, aggregate="mean", label="", about="", steady=False, settles=False,
       condition=GENERIC) -> Figure:
    return Figure(name, unit, origin, spark, fields, aggregate, label or name.replace("_", " ").capitalize(),
                  about, steady, settles, condition)


_ALERTED = (
    _f("batch_duration", DURATION, PROGRESS, "batchDuration", {QUERY: (FIELD_BATCH_MS, _MS)},
       label="Batch duration", about="a micro-batch's duration", steady=True),
    _f("batch_age", DURATION, PROGRESS, "batchDuration", {QUERY: (FIELD_BATCH_MS, _MS)}, AGE, "Time since last batch",
       about="time since the query's last batch ended (or its run started), growing while the query "
             "is dead, stuck or starved; none once its run finished or was stopped"),
    _f("trigger", DURATION, PROGRESS, "trigger interval", {QUERY: (FIELD_TRIGGER_MS, _MS)}, label="Trigger",
       about="the query's trigger interval"),
    _f("overrun_share", SHARE, PROGRESS, "batchDuration > trigger",
       {QUERY: (FIELD_OVERRAN, 1.0), JOB: (FIELD_OVERRUN_SHARE, 1.0)}, label="Batches over the trigger",
       about="share of batches longer than the trigger", steady=True),
    _f("input_rate", RATE, PROGRESS, "inputRowsPerSecond",
       {QUERY: (FIELD_INPUT_ROWS_PER_S, 1.0), SOURCE: (FIELD_INPUT_ROWS_PER_S, 1.0),
        JOB: (FIELD_INPUT_ROWS_PER_S, 1.0)}, label="Input rate", about="rows/s arriving (Spark's inputRowsPerSecond)"),
    _f("processing_rate", RATE, PROGRESS, "processedRowsPerSecond",
       {QUERY: (FIELD_PROCESSED_ROWS_PER_S, 1.0), SOURCE: (FIELD_PROCESSED_ROWS_PER_S, 1.0),
        JOB: (FIELD_PROCESSED_ROWS_PER_S, 1.0)}, label="Process rate",
       about="rows/s processed (Spark's processedRowsPerSecond)", steady=True),
    _f("input_rows", ROWS, PROGRESS, "numInputRows",
       {QUERY: (FIELD_INPUT_ROWS, 1.0), SOURCE: (FIELD_INPUT_ROWS, 1.0)}, "sum", "Input rows", about="rows read"),
    _f("rows_behind", ROWS, SOURCE_PROGRESS, "latestOffset - endOffset",
       {QUERY: (FIELD_ROWS_BEHIND, 1.0), SOURCE: (FIELD_ROWS_BEHIND, 1.0)}, label="Rows behind",
       about="rows the sources are behind their latest offsets"),
    _f("files_behind", ROWS, SOURCE_PROGRESS, "numFilesOutstanding", {SOURCE: (FIELD_FILES_BEHIND, 1.0)},
       label="Files behind", about="files a file source has not read"),
    _f("watermark_delay", DURATION, PROGRESS, "eventTime.watermark", {QUERY: (FIELD_WATERMARK_DELAY_MS, _MS)},
       label="Watermark delay", about="trigger start minus the watermark"),
    _f("late_rows", ROWS, OPERATOR_PROGRESS, "numRowsDroppedByWatermark",
       {QUERY: (FIELD_LATE_ROWS, 1.0), OPERATOR: (FIELD_LATE_ROWS, 1.0)}, "sum", "Rows dropped by the watermark",
       about="rows dropped by the watermark"),
    _f("state_rows", ROWS, OPERATOR_PROGRESS, "numRowsTotal",
       {QUERY: (FIELD_STATE_ROWS, 1.0), OPERATOR: (FIELD_ROWS_TOTAL, 1.0)}, label="State rows",
       about="rows held in state"),
    _f("state_memory", BYTES, OPERATOR_PROGRESS, "memoryUsedBytes",
       {QUERY: (FIELD_STATE_MEMORY_BYTES, 1.0), OPERATOR: (FIELD_MEMORY_BYTES, 1.0)}, label="State memory",
       about="memory of the state stores"),
    _f("heap_used", BYTES, EXECUTOR_SOURCE, "jvm.heap.used", {EXECUTOR: (FIELD_HEAP_USED_BYTES, 1.0)},
       label="Heap used", about="an executor's JVM heap in use"),
    _f("gc_time", DURATION, EXECUTOR_SOURCE, "jvm.<collector>.time", {EXECUTOR: (FIELD_GC_TIME_MS, _MS)}, INCREASE,
       "GC time", about="an executor's JVM garbage-collection time within the window"),
    _f("executors_lost", COUNT, STATUS_STORE, "removed executors", {APPLICATION: (FIELD_LOST, 1.0)}, INCREASE,
       "Executors lost",
       about="executors the application lost within the window (a worker gone, an executor killed)"),
    _f("failed_tasks", COUNT, STATUS_STORE, "failedTasks",
       {APPLICATION: (FIELD_FAILED_TASKS, 1.0), BATCH_FAILURES: (FIELD_FAILED_TASKS, 1.0)}, INCREASE,
       "Failed tasks", about="task attempts that failed within the window (Spark ran them again)"),
)

#: Market Spread's (and any job's) step and backpressure figures, each with its own condition grammar.
_STEP_AND_JOB = (
    _f("latency", DURATION, STEP, "a step's latency", {STEPS: (FIELD_HDR, 1.0)}, "p99", "Latency",
       about="a step's latency percentile over the window (its histograms merged)", condition=OWN),
    _f("throughput", RATE, STEP, "a step's events", {STEPS: (FIELD_COUNT, 1.0)}, PER_SECOND, "Throughput",
       about="events/s through a step over the window", settles=True, condition=OWN),
    _f("backlog", ROWS, BACKPRESSURE_FIGURES, "latestOffset - endOffset",
       {JOB: (FIELD_BACKLOG, 1.0), QUERY: (FIELD_BACKLOG, 1.0)}, label="Backlog",
       about="events the job is behind its input", condition=OWN),
    _f("backpressure", SHARE, BACKPRESSURE_FIGURES, "muted share", {JOB: (FIELD_BACKPRESSURED_SHARE, 1.0)},
       label="Backpressured", about="share of the window the job's input was held back", condition=OWN),
)

#: Figures the pages and exports read; no alert condition names them (yet).
_PAGES = (
    _f("events", ROWS, PROGRESS, "source offsets", {QUERY: (FIELD_EVENTS, 1.0)}, "sum", "Events",
       about="events a batch's source offsets cover", condition=None),
    _f("input_blocks", ROWS, PROGRESS, "numInputRows", {QUERY: (FIELD_INPUT_BLOCKS, 1.0)}, "sum", "Input blocks",
       about="rows Spark counted (Market Spread: blocks of events)", condition=None),
    _f("dropped_records", ROWS, PROGRESS, "dropped by the listener", {QUERY: (FIELD_DROPPED_RECORDS, 1.0)}, "sum",
       "Dropped progress records", about="progress records the listener's queue dropped", condition=None),
    _f("input_event_rate", RATE, PROGRESS, "events / trigger gap", {QUERY: (FIELD_INPUT_EVENTS_PER_S, 1.0)},
       label="Input events/s", condition=None),
    _f("processed_event_rate", RATE, PROGRESS, "events / batchDuration",
       {QUERY: (FIELD_PROCESSED_EVENTS_PER_S, 1.0)}, label="Processed events/s", condition=None),
    _f("end_seq", COUNT, PROGRESS, "endOffset.seq", {QUERY: (FIELD_END_SEQ, 1.0)}, "last", "End offset",
       condition=None),
    _f("watermark", DURATION, PROGRESS, "eventTime.watermark", {QUERY: (FIELD_WATERMARK_NS, 1.0)}, "last",
       "Watermark", about="the watermark, ns since the epoch", condition=None),
    _f("batch_id", COUNT, PROGRESS, "batchId", {QUERY: (FIELD_BATCH_ID, 1.0), BATCH_FAILURES: (FIELD_BATCH_ID, 1.0)},
       "last", "Batch", condition=None),
    _f("rows_updated", ROWS, OPERATOR_PROGRESS, "numRowsUpdated", {OPERATOR: (FIELD_ROWS_UPDATED, 1.0)}, "sum",
       "State rows updated", condition=None),
    _f("rows_removed", ROWS, OPERATOR_PROGRESS, "numRowsRemoved", {OPERATOR: (FIELD_ROWS_REMOVED, 1.0)}, "sum",
       "State rows removed", condition=None),
    _f("heap_max", BYTES, EXECUTOR_SOURCE, "jvm.heap.max", {EXECUTOR: (FIELD_HEAP_MAX_BYTES, 1.0)}, label="Heap max",
       condition=None),
    _f("heap_committed", BYTES, EXECUTOR_SOURCE, "jvm.heap.committed", {EXECUTOR: (FIELD_HEAP_COMMITTED_BYTES, 1.0)},
       label="Heap committed", condition=None),
    _f("non_heap_used", BYTES, EXECUTOR_SOURCE, "jvm.non-heap.used", {EXECUTOR: (FIELD_NON_HEAP_USED_BYTES, 1.0)},
       label="Non-heap used", condition=None),
    _f("jvm_cpu_time", DURATION, EXECUTOR_SOURCE, "JVMCPU.jvmCpuTime", {EXECUTOR: (FIELD_JVM_CPU_TIME_NS, 1.0)},
       INCREASE, "JVM CPU time", condition=None),
    _f("task_cpu_time", DURATION, EXECUTOR_SOURCE, "executor.cpuTime", {EXECUTOR: (FIELD_CPU_TIME_NS, 1.0)},
       INCREASE, "Task CPU time", condition=None),
    _f("running_tasks", COUNT, EXECUTOR_SOURCE, "executor.threadpool.activeTasks",
       {EXECUTOR: (FIELD_RUNNING_TASKS, 1.0)}, label="Running tasks", condition=None),
    _f("completed_tasks", COUNT, EXECUTOR_SOURCE, "executor.threadpool.completeTasks",
       {EXECUTOR: (FIELD_COMPLETED_TASKS, 1.0)}, INCREASE, "Completed tasks", condition=None),
    _f("shuffle_read", BYTES, EXECUTOR_SOURCE, "executor.shuffleTotalBytesRead",
       {EXECUTOR: (FIELD_SHUFFLE_READ_BYTES, 1.0)}, INCREASE, "Shuffle read", condition=None),
    _f("shuffle_write", BYTES, EXECUTOR_SOURCE, "executor.shuffleBytesWritten",
       {EXECUTOR: (FIELD_SHUFFLE_WRITE_BYTES, 1.0)}, INCREASE, "Shuffle write", condition=None),
    _f("memory_spilled", BYTES, EXECUTOR_SOURCE, "executor.memoryBytesSpilled",
       {EXECUTOR: (FIELD_MEMORY_SPILLED_BYTES, 1.0)}, INCREASE, "Memory spilled", condition=None),
    _f("disk_spilled", BYTES, EXECUTOR_SOURCE, "executor.diskBytesSpilled",
       {EXECUTOR: (FIELD_DISK_SPILLED_BYTES, 1.0)}, INCREASE, "Disk spilled", condition=None),
    _f("gc_count", COUNT, EXECUTOR_SOURCE, "jvm.<collector>.count", {EXECUTOR: (FIELD_GC_COUNT, 1.0)}, INCREASE,
       "GC count", condition=None),
    _f("executors_active", COUNT, STATUS_STORE, "active executors", {APPLICATION: (FIELD_ACTIVE, 1.0)}, "last",
       "Executors", condition=None),
    _f("busy_share", SHARE, BACKPRESSURE_FIGURES, "batches' share of wall time", {JOB: (FIELD_BUSY_SHARE, 1.0)},
       label="Busy", condition=None),
    _f("idle_share", SHARE, BACKPRESSURE_FIGURES, "1 - busy", {JOB: (FIELD_IDLE_SHARE, 1.0)}, label="Idle",
       condition=None),
    _f("backlog_growth", RATE, BACKPRESSURE_FIGURES, "backlog's growth", {JOB: (FIELD_BACKLOG_GROWTH_PER_S, 1.0)},
       label="Backlog growth", condition=None),
)

FIGURES: Mapping[str, Figure] = {f.name: f for f in _ALERTED + _STEP_AND_JOB + _PAGES}

#: Fields written without a figure of their own: a run's last lost executor (text), a step's status (text).
TEXT_FIELDS: Mapping[str, tuple[str, ...]] = {SPARK_EXECUTORS: (FIELD_LAST_LOST,), BACKPRESSURE: (FIELD_BP_STATUS,)}


def fields_of(measurement: str) -> frozenset[str]:
    """Return every field the catalogue knows written to `measurement` (spark_progress: its phases too)."""
    out = {field for f in FIGURES.values() for level, (field, _) in f.fields.items()
           if LEVELS[level].measurement == measurement}
    out.update(TEXT_FIELDS.get(measurement, ()))
    if measurement == SPARK_PROGRESS:
        out.update(phase_field(p) for p in PHASES)
    return frozenset(out)


#: The Spark field names the architecture test keeps inside the catalogue (distinctive words only:
#: `count`, `status`, `active` or `lost` mean other things elsewhere too).
SPARK_FIELD_NAMES = frozenset(
    name for m in (SPARK_PROGRESS, SPARK_SOURCE, SPARK_STATE, SPARK_EXECUTOR, SPARK_EXECUTORS, SPARK_TASK_FAILURES)
    for name in fields_of(m) if "_" in name and not name.endswith(tuple(f"{p}_ms" for p in PHASES))) - {FIELD_BATCH_ID}
