"""Graphite plaintext from Spark's metrics system: parsing, mapping to `spark_executor`, hostile lines, the sink's properties."""
from __future__ import annotations

from pathlib import Path

import pytest

from collector.graphite import (
    MAX_LINE_BYTES, MEASUREMENT, SINK_REGEX, ExecutorReportAssembler, GraphiteLine, parse_line,
    spark_metrics_conf, split_spark_path,
)
from collector.names import check_tag_value

# Lines Spark 4 sent: a local[2] driver's report (the driver is the executor), then
# executor 0's report and master/worker lines of a local-cluster[1,1,512] application.
LINES = (Path(__file__).parent / "data" / "spark_graphite_lines.txt").read_text().splitlines()
LOCAL_APP, CLUSTER_APP = "local-1795869546325", "app-20261128124013-0000"


def assemble(lines, now=0.0):
    asm = ExecutorReportAssembler()
    points = []
    for raw in lines:
        points += asm.add(parse_line(raw), now)
    return asm, points + asm.end_of_report()


def test_every_real_line_parses():
    parsed = [parse_line(raw) for raw in LINES]
    assert len(parsed) == len(LINES) > 100
    heap = next(p for p in parsed if p.path == f"sparkmon.{LOCAL_APP}.driver.jvm.heap.used")
    assert heap == GraphiteLine(f"sparkmon.{LOCAL_APP}.driver.jvm.heap.used", 224027192.0, 1795869556)


def test_real_reports_become_one_point_per_app_and_executor():
    asm, points = assemble(LINES)
    by_tags = {(p.tags["app"], p.tags["executor"]): p for p in points}
    assert set(by_tags) == {(LOCAL_APP, "driver"), (CLUSTER_APP, "0")}
    assert {p.measurement for p in points} == {MEASUREMENT}

    driver = by_tags[(LOCAL_APP, "driver")]
    assert driver.time_ns == 1795869556 * 10**9
    assert driver.fields == {
        "heap_used_bytes": 224027192, "heap_max_bytes": 1073741824, "heap_committed_bytes": 364904448,
        "non_heap_used_bytes": 178468448, "jvm_cpu_time_ns": 14150000000,
        "cpu_time_ns": 1131911649, "running_tasks": 0, "completed_tasks": 36,
        "shuffle_read_bytes": 120504, "shuffle_write_bytes": 120504,
        "memory_spilled_bytes": 0, "disk_spilled_bytes": 0,
        "gc_time_ms": 302, "gc_count": 27,      # G1 young + old; the direct and mapped buffer counts are not GCs
    }
    executor = by_tags[(CLUSTER_APP, "0")]
    assert executor.fields["heap_max_bytes"] == 536870912 and executor.fields["cpu_time_ns"] == 646016303
    assert executor.fields["gc_count"] == 11 and executor.fields["gc_time_ms"] == 209
    assert all(type(v) is int for p in points for v in p.fields.values())   # one field type forever
    # BlockManager, DAGScheduler, ExecutorMetrics, master, worker ... are counted, not mapped
    assert asm.unknown > 50


def test_master_and_worker_lines_are_not_executors():
    for raw in LINES:
        line = parse_line(raw)
        if line.path.startswith(("sparkmon.master.", "sparkmon.worker.", "sparkmon.jvm.")):
            assert split_spark_path(line) is None


def test_a_newer_timestamp_closes_the_older_report():
    other = ExecutorReportAssembler()                 # another prefix: nothing is ours
    other.add(parse_line("p.app-1.3.jvm.heap.used 10 1800000000"), 0.0)
    assert other.end_of_report() == [] and other.unknown == 1
    asm = ExecutorReportAssembler(prefix="p")
    asm.add(parse_line("p.app-1.3.jvm.heap.used 10 1800000000"), 0.0)
    [point] = asm.add(parse_line("p.app-1.3.jvm.heap.used 20 1800000002"), 0.1)
    assert point.fields == {"heap_used_bytes": 10} and point.tags == {"app": "app-1", "executor": "3"}
    assert asm.drain(0.5, quiet_s=1.0) == [] and asm.open_reports() == 1
    [point] = asm.drain(1.2, quiet_s=1.0)
    assert point.fields == {"heap_used_bytes": 20} and asm.open_reports() == 0


def test_open_reports_are_bounded():
    asm = ExecutorReportAssembler(prefix="p", max_open=4)
    out = []
    for i in range(10):
        out += asm.add(parse_line(f"p.app-{i}.driver.jvm.heap.used {i} 1800000000"), float(i))
    assert asm.open_reports() == 4 and [p.tags["app"] for p in out] == [f"app-{i}" for i in range(6)]


def test_large_integers_stay_exact():
    _, [point] = assemble(["sparkmon.app-1.3.JVMCPU.jvmCpuTime 9007199254740993 1800000000"])
    assert point.fields == {"jvm_cpu_time_ns": 9007199254740993}       # 2**53 + 1


def test_undefined_maximum_and_absurd_values_are_left_out():
    _, [point] = assemble(["sparkmon.app-1.driver.jvm.heap.max -1 1800000000",
                           "sparkmon.app-1.driver.jvm.heap.committed 1e300 1800000000",
                           "sparkmon.app-1.driver.jvm.non-heap.used 9223372036854775808 1800000000",
                           "sparkmon.app-1.driver.jvm.heap.used 5 1800000000"])
    assert point.fields == {"heap_used_bytes": 5}


@pytest.mark.parametrize("raw, why", [
    (b"a.b " + b"9" * MAX_LINE_BYTES + b" 1800000000", "bytes"),
    ("sparkmon.app-1.driver.jvm.heap.used nan 1800000000", "finite"),
    ("sparkmon.app-1.driver.jvm.heap.used inf 1800000000", "finite"),
    ("sparkmon.app-1.driver.jvm.heap.used 1e999 1800000000", "finite"),
    ("sparkmon.app-1.driver.jvm.heap.used 1 -5", "range"),
    ("sparkmon.app-1.driver.jvm.heap.used 1 99999999999", "range"),
    ("sparkmon.app-1.driver.jvm.heap.used 1 1.8e9", "number"),
    ("sparkmon.app-1.driver.jvm.heap.used 1", "3 fields"),
    ("sparkmon.app-1.driver.jvm.heap.used 1 1800000000 extra", "3 fields"),
    (b"\xff\xfe\x00garbage 1 1800000000", "ASCII"),
    (b"sparkmon.app\x00.driver.jvm.heap.used 1 1800000000", "path"),
    ("sparkmon.app-1.driver/../../etc.jvm.heap.used 1 1800000000", "path"),
    ("sparkmon..driver.jvm.heap.used 1 1800000000", "path"),
    ('sparkmon.app"1,x=y.driver.jvm.heap.used 1 1800000000', "path"),
    ("sparkmon.app\\1.driver.jvm.heap.used 1 1800000000", "path"),
    ("", "3 fields"),
])
def test_hostile_lines_are_refused(raw, why):
    with pytest.raises(ValueError, match=why):
        parse_line(raw)


@pytest.mark.parametrize("path", [
    "sparkmon.-app.driver.jvm.heap.used",            # an app id check_name refuses
    "sparkmon.app-1.exec'1.jvm.heap.used",           # an executor id Spark never makes
    "sparkmon.app-1.1234567890123.jvm.heap.used",
    "sparkmon." + "a" * 200 + ".driver.jvm.heap.used",
])
def test_paths_whose_tags_would_be_unsafe_are_ignored(path):
    asm = ExecutorReportAssembler()
    assert asm.add(parse_line(f"{path} 1 1800000000"), 0.0) == [] and asm.end_of_report() == []
    assert asm.unknown == 1


def test_every_tag_value_of_real_points_passes_the_tag_check():
    _, points = assemble(LINES)
    for p in points:
        for name, value in p.tags.items():
            assert check_tag_value(value, name) == value


def test_sink_properties():
    conf = spark_metrics_conf("10.0.0.5", 2003)
    assert conf["spark.metrics.conf.*.sink.graphite.class"] == "org.apache.spark.metrics.sink.GraphiteSink"
    assert (conf["spark.metrics.conf.*.sink.graphite.host"], conf["spark.metrics.conf.*.sink.graphite.port"]) \
        == ("10.0.0.5", "2003")
    assert conf["spark.metrics.conf.*.sink.graphite.period"] == "2"
    assert conf["spark.metrics.conf.*.sink.graphite.prefix"] == "sparkmon"
    assert conf["spark.metrics.conf.*.source.jvm.class"] == "org.apache.spark.metrics.source.JvmSource"
    assert all(isinstance(v, str) for v in conf.values())


def test_sink_regex_keeps_exactly_the_mapped_metrics():
    import re
    rx = re.compile(SINK_REGEX)
    # Dropwizard matches registry names, to which its Graphite reporter adds `.count` for counters
    names = [raw.split()[0].removeprefix("sparkmon.") for raw in LINES]
    kept = [raw for raw, name in zip(LINES, names) if rx.search(name) or rx.search(name.removesuffix(".count"))]
    _, points = assemble(LINES)
    _, points_kept = assemble(kept)
    assert points_kept == points and len(kept) < len(LINES) / 3


@pytest.mark.parametrize("kwargs", [
    {"period_s": 0}, {"period_s": 0.5}, {"period_s": True}, {"port": 0}, {"port": 70000},
    {"host": ""}, {"host": "a b"}, {"prefix": "a.b"}, {"prefix": "../x"},
])
def test_sink_properties_refuse_what_spark_would_fail_on(kwargs):
    args = {"host": "127.0.0.1", "port": 2003, **kwargs}
    with pytest.raises(ValueError):
        spark_metrics_conf(**args)
