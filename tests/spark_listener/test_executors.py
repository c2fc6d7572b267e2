"""The executor watch's pure parts, its poll on a real local session, and the `executors_lost` rule.

The lost worker itself (a real cluster, a SIGKILLed worker, InfluxDB, the alert firing) is
tests/reliability/test_lost_worker.py.
"""
from __future__ import annotations

import pytest

from alerts.figure_read import figure_request
from alerts.figures import FIGURES, format_value
from alerts.rules import Rule
from collector.influx.figure_reads import figure_influxql
from collector.testing import MemoryWriter
from collector.vocabulary import SPARK_EXECUTORS, SPARK_TASK_FAILURES
from spark_listener.executors import ExecutorState, ExecutorWatch, JobFailures, batch_failures, summarize


def test_summarize_counts_active_and_lost_executors_not_the_driver():
    s = summarize([ExecutorState("driver", "h:1", True, "", 0),
                   ExecutorState("0", "h:2", True, "", 1),
                   ExecutorState("1", "h:3", False, "worker lost: h:3 got disassociated", 2),
                   ExecutorState("2", "h:4", True, "", 0)])
    assert (s.active, s.lost, s.failed_tasks) == (2, 1, 3)
    assert s.last_lost == "1 on h:3: worker lost: h:3 got disassociated"
    assert summarize([]).last_lost == ""


def test_batch_failures_read_the_streaming_description():
    desc = "market-spread\nid = 9f\nrunId = 3c\nbatch = {}"
    jobs = [JobFailures(desc.format(4), 1), JobFailures(desc.format(4), 2), JobFailures(desc.format(5), 0),
            JobFailures("a plain job", 3), JobFailures("\nid = 1\nrunId = 2\nbatch = 7", 1)]
    assert batch_failures(jobs) == {("market-spread", 4): 3, ("", 7): 1}


def test_a_poll_on_a_local_session_writes_the_roster_and_never_raises(spark):
    writer = MemoryWriter()
    watch = ExecutorWatch(spark.sparkContext, "run-x", writer, every_s=0.05)
    points = watch.poll()
    assert [p.measurement for p in points] == [SPARK_EXECUTORS]
    assert points[0].tags == {"run": "run-x", "app": spark.sparkContext.applicationId}
    assert points[0].fields["lost"] == 0 and points[0].fields["last_lost"] == ""

    class Broken:                               # a context whose gateway fails: the poll fails, the watch goes on
        applicationId = "app-1"
        _jsc = object()
    broken = ExecutorWatch(Broken(), "run-x", writer, every_s=0.01).start()
    broken.stop()
    assert broken.failures >= 1 and broken.polls == 0
    assert SPARK_TASK_FAILURES not in {p.measurement for p in writer.points}


def test_a_stopped_context_ends_the_watch_quietly(caplog):
    class Stopped:                              # what PySpark leaves of a context after `spark.stop()`
        applicationId = "app-1"
        _jsc = None
    writer = MemoryWriter()
    with caplog.at_level("WARNING", logger="spark_listener.executors"):
        watch = ExecutorWatch(Stopped(), "run-x", writer, every_s=0.01).start()
        watch._thread.join(5)
        assert not watch._thread.is_alive()     # ended by itself
        watch.stop()
    assert watch.failures == 0 and not caplog.records and not writer.points


def test_executors_lost_is_a_count_read_as_its_increase():
    rule = Rule.from_dict({"name": "lost", "condition": "executors_lost > 0", "job": "r1"})
    q, params = figure_influxql(figure_request(rule, 0, 10**9))
    assert 'spread("lost")' in q and f'FROM "{SPARK_EXECUTORS}"' in q and params["run"] == "r1"
    assert format_value(FIGURES["executors_lost"], 2.0) == "2"
    with pytest.raises(ValueError, match="cumulative"):
        Rule.from_dict({"name": "x", "condition": "max(executors_lost) > 0"})
    with pytest.raises(ValueError, match="executor"):
        Rule.from_dict({"name": "x", "condition": "executors_lost > 0", "app": "app-1"})


def test_the_monitor_writes_the_applications_executors(spark, tmp_path):
    from spark_listener.monitor import monitor
    w = MemoryWriter()
    with monitor(spark, name="api-run", writer=w, spool_dir=tmp_path / "spool"):
        pass                                    # stopping polls once more, while the application runs
    roster = w.measurement(SPARK_EXECUTORS)
    assert roster and roster[-1].tags == {"run": "api-run", "app": spark.sparkContext.applicationId}
    assert roster[-1].fields["lost"] == 0
