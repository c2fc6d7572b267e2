"""Spark's metrics system as Graphite plaintext, both ways: the sink's properties and its lines to points.

Spark's `GraphiteSink` sends one report per metrics instance (driver, each executor) every
period, each over a fresh TCP connection, one `<path> <value> <seconds>` line per metric.
Paths are `<prefix>.<app id>.<executor id>.<source>.<metric...>` (the namespace is the
application id by default); `ExecutorReportAssembler` turns one report's curated lines
into one `spark_executor` point (tags `app`, `executor`), ignoring (and counting) the rest.
Pure logic: `collector/graphite_relay.py` does the socket side.

Example (a relay takes only lines with its own secret prefix: pass it, or use `relay.spark_conf()`)::

    conf = spark_metrics_conf("127.0.0.1", relay.port, prefix=relay.prefix)   # before the SparkContext exists
    spark = SparkSession.builder.config(map=conf).getOrCreate()
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from collector.influx.lineproto import Point
from collector.names import InvalidName, check_name
from collector.vocabulary import SPARK_EXECUTOR, TAG_APP, TAG_EXECUTOR

MEASUREMENT = SPARK_EXECUTOR
#: A Graphite line longer than this (bytes, without the newline) is refused; Spark's are < 200.
MAX_LINE_BYTES = 1024
#: Spark refuses a sink period under one second (`MetricsSystem.checkMinimalPollingPeriod`).
MIN_PERIOD_S = 1
DEFAULT_PREFIX = "sparkmon"
#: Timestamps outside [2000-01-01, 2100-01-01) are refused as garbage.
_TS_MIN, _TS_MAX = 946_684_800, 4_102_444_800
_PATH = re.compile(r"[A-Za-z0-9_.:@+'\-]+")
_EXECUTOR = re.compile(r"driver|[0-9]{1,9}")
_INT_LIMIT = 2**63                   # InfluxDB's integer fields are signed 64-bit
_INTEGER = re.compile(r"-?[0-9]{1,19}")

#: (source, metric) -> field, from what Spark 4.3 sends (tests/collector/data/spark_graphite_lines.txt).
#: Executor-source counters arrive with Dropwizard's `.count` suffix.
FIELDS: dict[tuple[str, str], str] = {
    ("jvm", "heap.used"): "heap_used_bytes",
    ("jvm", "heap.max"): "heap_max_bytes",
    ("jvm", "heap.committed"): "heap_committed_bytes",
    ("jvm", "non-heap.used"): "non_heap_used_bytes",
    ("JVMCPU", "jvmCpuTime"): "jvm_cpu_time_ns",
    ("executor", "cpuTime.count"): "cpu_time_ns",
    ("executor", "threadpool.activeTasks"): "running_tasks",
    ("executor", "threadpool.completeTasks"): "completed_tasks",
    ("executor", "shuffleTotalBytesRead.count"): "shuffle_read_bytes",
    ("executor", "shuffleBytesWritten.count"): "shuffle_write_bytes",
    ("executor", "memoryBytesSpilled.count"): "memory_spilled_bytes",
    ("executor", "diskBytesSpilled.count"): "disk_spilled_bytes",
}
GC_TIME, GC_COUNT = "gc_time_ms", "gc_count"

#: Only what FIELDS and the collectors need leaves Spark (about 18 lines a report instead of
#: about 300); matched by Dropwizard against registry names, which lack the `.count` suffix.
SINK_REGEX = (r"\.(jvm\.(heap\.(used|max|committed)|non-heap\.used|[^.]+\.(time|count))"
              r"|JVMCPU\.jvmCpuTime"
              r"|executor\.(cpuTime|shuffleTotalBytesRead|shuffleBytesWritten|memoryBytesSpilled"
              r"|diskBytesSpilled|threadpool\.(activeTasks|completeTasks)))$")


@dataclass(frozen=True)
class GraphiteLine:
    """One parsed plaintext line: a dotted path, a finite value, whole seconds since the epoch.

    Integers stay exact (`int`): cumulative nanoseconds pass 2**53 on a long-lived executor.
    """
    path: str
    value: int | float
    ts_s: int


def parse_line(raw: bytes | str) -> GraphiteLine:
    """Parse one `<path> <value> <timestamp>` line (no newline) or raise ValueError saying why."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "replace")
    if len(raw) > MAX_LINE_BYTES:
        raise ValueError(f"line of {len(raw)} bytes; at most {MAX_LINE_BYTES}")
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ValueError("line is not ASCII") from None
    parts = text.split()
    if len(parts) != 3:
        raise ValueError(f"expected 3 fields, got {len(parts)}")
    path, value_text, ts_text = parts
    if not _PATH.fullmatch(path) or ".." in path or path.startswith(".") or path.endswith("."):
        raise ValueError("path has characters or empty parts Spark never sends")
    try:
        value = int(value_text) if _INTEGER.fullmatch(value_text) else float(value_text)
        ts = int(ts_text)
    except ValueError:
        raise ValueError("value or timestamp is not a number") from None
    if not math.isfinite(value):
        raise ValueError("value is not finite")
    if not _TS_MIN <= ts < _TS_MAX:
        raise ValueError(f"timestamp {ts} is out of range")
    return GraphiteLine(path, value, ts)


@dataclass(frozen=True)
class SparkMetric:
    """One line of a Spark driver's or executor's report, its path split into Spark's parts."""
    app: str
    executor: str
    source: str
    metric: str
    value: int | float
    ts_s: int


def split_spark_path(line: GraphiteLine, prefix: str = DEFAULT_PREFIX) -> SparkMetric | None:
    """Split `<prefix>.<app>.<executor>.<source>.<metric>`; None for other instances (master, worker)."""
    if not line.path.startswith(prefix + "."):
        return None
    parts = line.path[len(prefix) + 1:].split(".", 3)
    if len(parts) != 4 or not _EXECUTOR.fullmatch(parts[1]):
        return None
    app, executor, source, metric = parts
    try:
        check_name(app, "application id")
    except InvalidName:
        return None
    return SparkMetric(app, executor, source, metric, line.value, line.ts_s)


class _Report:
    """The fields of one (app, executor, timestamp) report gathered so far."""
    __slots__ = ("fields", "gc_time", "gc_count", "touched")

    def __init__(self, now: float):
        self.fields: dict[str, int] = {}
        self.gc_time: dict[str, int] = {}
        self.gc_count: dict[str, int] = {}
        self.touched = now

    def add(self, m: SparkMetric) -> bool:
        """Keep a curated metric; False for one this schema does not map."""
        field = FIELDS.get((m.source, m.metric))
        if field is not None:
            if 0 <= m.value < _INT_LIMIT:     # -1 is Dropwizard's "undefined" (a max without limit)
                self.fields[field] = int(round(m.value))
            return True
        if m.source == "jvm" and m.metric.count(".") == 1:
            pool, kind = m.metric.split(".")
            # Collectors report `time` and `count`; buffer pools (direct, mapped) report
            # `count` without `time`, so a collector is a name seen with `time`.
            if kind in ("time", "count") and 0 <= m.value < _INT_LIMIT:
                (self.gc_time if kind == "time" else self.gc_count)[pool] = int(round(m.value))
                return True
        return False

    def point(self, app: str, executor: str, ts_s: int) -> Point | None:
        """Return the report as one point; None when nothing curated arrived."""
        fields: dict[str, int] = dict(self.fields)
        if self.gc_time:
            fields[GC_TIME] = sum(self.gc_time.values())
            fields[GC_COUNT] = sum(n for pool, n in self.gc_count.items() if pool in self.gc_time)
        if not fields:
            return None
        return Point(SPARK_EXECUTOR, {TAG_APP: app, TAG_EXECUTOR: executor}, fields, ts_s * 1_000_000_000)


class ExecutorReportAssembler:
    """Gather Spark's report lines into one `spark_executor` point per (app, executor, timestamp).

    A report is complete when its sender's connection closes (`end_of_report`), when a
    newer timestamp of the same app and executor arrives, or when it has been quiet for
    `quiet_s` (`drain`); at most `max_open` reports are open, the oldest is closed first.
    The caller passes the clock (`now`, seconds), so this stays pure.
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX, max_open: int = 256):
        self.prefix = prefix
        self.max_open = max_open
        self.unknown = 0              # lines of other instances or metrics the schema does not map
        self._open: dict[tuple[str, str, int], _Report] = {}

    def add(self, line: GraphiteLine, now: float) -> list[Point]:
        """Take one line; return the points of reports it completes (usually none)."""
        m = split_spark_path(line, self.prefix)
        if m is None:
            self.unknown += 1
            return []
        out: list[Point] = []
        key = (m.app, m.executor, m.ts_s)
        report = self._open.get(key)
        if report is None:
            out = self._close(lambda k: k[:2] == key[:2] and k[2] < key[2])
            if len(self._open) >= self.max_open:
                oldest = min(self._open, key=lambda k: self._open[k].touched)
                out += self._close(lambda k: k == oldest)
            report = self._open[key] = _Report(now)
        report.touched = now
        if not report.add(m):
            self.unknown += 1
        return out

    def end_of_report(self) -> list[Point]:
        """Close every open report (a sender closed its connection: Spark's reports end so)."""
        return self._close(lambda k: True)

    def drain(self, now: float, quiet_s: float = 1.0) -> list[Point]:
        """Close the reports no line has touched for `quiet_s`."""
        return self._close(lambda k: now - self._open[k].touched >= quiet_s)

    def open_reports(self) -> int:
        """Return how many reports are still gathering lines."""
        return len(self._open)

    def _close(self, which) -> list[Point]:
        keys = [k for k in self._open if which(k)]
        points = [self._open.pop(k).point(*k) for k in keys]
        return [p for p in points if p is not None]


def spark_metrics_conf(host: str, port: int, period_s: int = 2, prefix: str = DEFAULT_PREFIX) -> dict[str, str]:
    """Return the Spark properties that send driver and executor JVM figures to a relay at `host:port`.

    `prefix` starts every line Spark sends: give the relay's own (`GraphiteRelay.prefix`).

    Set them before the SparkContext exists (`SparkSession.builder.config(map=...)`);
    Spark refuses a period under one second, so this does too, before the user's job starts.
    """
    if not isinstance(period_s, int) or isinstance(period_s, bool) or period_s < MIN_PERIOD_S:
        raise ValueError(f"metrics period must be a whole number of seconds >= {MIN_PERIOD_S}, got {period_s!r}")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"relay port must be 1-65535, got {port!r}")
    if not host or any(c.isspace() for c in host):
        raise ValueError(f"relay host {host!r} is empty or has spaces")
    check_name(prefix, "metrics prefix")
    if "." in prefix:
        raise ValueError(f"metrics prefix {prefix!r} must not contain '.': it is one path part")
    sink = "spark.metrics.conf.*.sink.graphite."
    return {
        sink + "class": "org.apache.spark.metrics.sink.GraphiteSink",
        sink + "host": host,
        sink + "port": str(port),
        sink + "period": str(period_s),
        sink + "unit": "seconds",
        sink + "prefix": prefix,
        sink + "protocol": "tcp",
        sink + "regex": SINK_REGEX,
        # The JVM source is off by default; `*` turns it on for the driver and every executor.
        "spark.metrics.conf.*.source.jvm.class": "org.apache.spark.metrics.source.JvmSource",
    }
