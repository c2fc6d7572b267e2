"""SparkMetricsListener: event conversion, hand-off and points; then a real query into a real InfluxDB."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from types import SimpleNamespace as NS

import pytest

from collector.influx import InfluxClient, InfluxWriter
from collector.testing import MemoryWriter
from spark_listener import BatchProgress, JobAdapter, ListenerOptions, SessionHooks, SparkMetricsListener
from spark_listener.records import offset_seq, parse_timestamp_ns, progress_record

QID, RID = uuid.UUID(int=1), uuid.UUID(int=2)
T0 = "2024-05-01T12:00:00.000Z"
T0_NS = parse_timestamp_ns(T0)
S = 1_000_000_000


def _ts(seconds: float) -> str:
    ms = int(round(seconds * 1000))
    return f"2024-05-01T12:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


def _progress(batch: int, at_s: float, start: int | None, end: int, latest: int, ms: int = 400,
              name: str = "market-spread", run_id: uuid.UUID = RID, blocks: int = 4):
    src = NS(description="PythonMicroBatchStream", numInputRows=blocks,
             startOffset="None" if start is None else f'{{"seq":{start}}}',
             endOffset=f'{{"seq":{end}}}', latestOffset=f'{{"seq":{latest}}}')
    ops = [NS(numRowsTotal=2, memoryUsedBytes=1000), NS(numRowsTotal=1, memoryUsedBytes=500)]
    p = NS(id=QID, runId=run_id, name=name, batchId=batch, timestamp=_ts(at_s), batchDuration=ms,
           durationMs={"triggerExecution": ms, "addBatch": ms - 100, "walCommit": 10},
           sources=[src], stateOperators=ops, numInputRows=blocks)
    return NS(progress=p)


def _started(at_s: float = 0.0, name: str = "market-spread", run_id: uuid.UUID = RID):
    return NS(id=QID, runId=run_id, name=name, timestamp=_ts(at_s))


def _terminated(exception: str | None = None, run_id: uuid.UUID = RID):
    return NS(id=QID, runId=run_id, exception=exception, errorClassOnException=None)


def test_timestamps_and_offsets_parse():
    assert parse_timestamp_ns("1970-01-01T00:00:01.234Z") == 1_234_000_000
    assert offset_seq('{"seq": 42}') == 42 and offset_seq({"seq": 7}) == 7
    assert offset_seq("None") is None and offset_seq(None) is None and offset_seq("{}") is None


def test_progress_record_counts_events_not_blocks():
    r = progress_record("r1", _progress(3, 2.0, 1000, 6000, 9000).progress, prev_ts_ns=T0_NS + S)
    assert isinstance(r, BatchProgress)
    assert (r.query, r.query_id, r.run_id, r.batch_id) == ("market-spread", str(QID), str(RID), 3)
    assert r.ts_ns == T0_NS + 2 * S and r.end_ns == T0_NS + 2 * S + 400_000_000
    assert (r.events, r.backlog, r.end_seq, r.input_blocks) == (5000, 3000, 6000, 4)
    assert r.input_events_per_s == pytest.approx(5000.0) and r.processed_events_per_s == pytest.approx(12_500.0)
    assert (r.state_rows, r.state_memory_bytes) == (3, 1500)
    assert r.durations_ms == {"triggerExecution": 400, "addBatch": 300, "walCommit": 10}
    first = progress_record("r1", _progress(0, 1.0, None, 800, 800).progress, prev_ts_ns=None)
    assert first.events == 800 and first.backlog == 0 and first.input_events_per_s is None


def test_progress_record_reads_pysparks_own_progress_objects():
    from pyspark.sql.streaming.listener import QueryProgressEvent
    src = {"description": "PythonMicroBatchStream", "startOffset": {"seq": 10}, "endOffset": {"seq": 110},
           "latestOffset": {"seq": 150}, "numInputRows": 2, "inputRowsPerSecond": 1.0,
           "processedRowsPerSecond": 1.0}
    op = {"operatorName": "applyInPandasWithState", "numRowsTotal": 2, "numRowsUpdated": 2, "numRowsRemoved": 0,
          "allUpdatesTimeMs": 1, "allRemovalsTimeMs": 0, "commitTimeMs": 1, "memoryUsedBytes": 4096,
          "numRowsDroppedByWatermark": 0, "numShufflePartitions": 2, "numStateStoreInstances": 2}
    ev = QueryProgressEvent.fromJson({"progress": {
        "id": str(QID), "runId": str(RID), "name": "market-spread", "timestamp": T0, "batchId": 5,
        "batchDuration": 250, "durationMs": {"triggerExecution": 250, "latestOffset": 3},
        "stateOperators": [op], "sources": [src], "sink": {"description": "sink", "numOutputRows": 1},
        "numInputRows": 2}})
    r = progress_record("r1", ev.progress, None)
    assert (r.events, r.backlog, r.state_rows, r.state_memory_bytes, r.batch_ms) == (100, 40, 2, 4096, 250)


def test_state_kept_outside_spark_is_reported_from_the_jobs_own_figure():
    """The job keeps its state in its own snapshots: its progress has no state operators."""
    from pyspark.sql.streaming.listener import QueryProgressEvent
    src = {"description": "PythonMicroBatchStream", "startOffset": {"seq": 0}, "endOffset": {"seq": 10},
           "latestOffset": {"seq": 10},
           "numInputRows": 1, "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 1.0}
    ev = QueryProgressEvent.fromJson({"progress": {
        "id": str(QID), "runId": str(RID), "name": "market-spread", "timestamp": T0, "batchId": 1,
        "batchDuration": 50, "durationMs": {"triggerExecution": 50}, "stateOperators": [], "sources": [src],
        "sink": {"description": "sink", "numOutputRows": 0}, "numInputRows": 1}})
    r = progress_record("r1", ev.progress, None, state_fn=lambda: (2000, 42_014))
    assert (r.state_rows, r.state_memory_bytes) == (2000, 42_014)
    assert progress_record("r1", ev.progress, None, state_fn=lambda: None).state_rows is None
    assert progress_record("r1", _progress(3, 2.0, 1000, 6000, 9000).progress, None,
                           state_fn=lambda: (1, 1)).state_rows == 3       # Spark's figure when it has one


def test_events_become_runs_progress_and_backpressure_points():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w, options=ListenerOptions(query_name="market-spread", backpressure_every_s=0)).start()
    lst.onQueryStarted(_started(0.0))
    lst.onQueryProgress(_progress(0, 1.0, None, 1000, 3000))
    lst.onQueryProgress(_progress(1, 1.5, 1000, 3000, 3000, ms=500))
    lst.onQueryTerminated(_terminated())
    assert lst.wait_terminated(1) and lst.flush(5)
    lst.stop()

    prog = w.measurement("spark_progress")
    assert [p.fields["events"] for p in prog] == [1000, 2000]
    assert sum(p.fields["events"] for p in prog) == 3000
    ids = {"query_id": str(QID), "run_id": str(RID)}
    assert dict(prog[0].tags) == {"run": "r1", "query": "market-spread", **ids, "phase": "startup"}
    assert prog[0].time_ns == T0_NS + S
    assert dict(prog[1].tags) == {"run": "r1", "query": "market-spread", **ids}     # steady from the second batch
    f = prog[1].fields
    assert isinstance(f["events"], int) and isinstance(f["addBatch_ms"], int)
    assert f["input_events_per_s"] == pytest.approx(4000.0) and f["processed_events_per_s"] == pytest.approx(4000.0)
    assert (f["backlog"], f["state_rows"], f["input_blocks"], f["batch_id"]) == (0, 3, 4, 1)

    runs = w.measurement("runs")
    assert [p.fields["status"] for p in runs] == ["running", "stopped"]     # no trigger read: not self-ending
    assert runs[0].time_ns == runs[1].time_ns == T0_NS          # one row per run in InfluxDB
    assert [dict(p.tags) for p in runs] == [{"run": "r1", "query": "market-spread", "run_id": str(RID)}] * 2
    assert runs[0].fields["query_id"] == str(QID) and runs[0].fields["last_seen_ns"] > 0
    assert runs[1].fields["start_ns"] == T0_NS and runs[1].fields["end_ns"] > T0_NS
    assert (runs[1].fields["events"], runs[1].fields["batches"]) == (3000, 2)

    bp = w.measurement("backpressure")
    assert [dict(p.tags) for p in bp] == [{"run": "r1", "step": "job", **ids}] * 2
    # the window starts at the query's start: batch 0 ran 1.0-1.4 s, batch 1 1.5-2.0 s
    assert bp[0].fields["busy_share"] == pytest.approx(0.4 / 1.4)
    assert bp[1].fields["busy_share"] == pytest.approx(0.9 / 2.0) and bp[1].fields["status"] == "OK"
    assert bp[1].fields["backlog"] == 0 and bp[1].fields["backlog_growth_per_s"] == pytest.approx(-2000 / 0.6)
    assert "backpressured_share" not in bp[1].fields


def test_backpressure_is_written_once_a_second_of_batches_and_progress_every_batch():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w, options=ListenerOptions(query_name="market-spread")).start()
    lst.onQueryStarted(_started(0.0))
    for b in range(12):              # batches ending 0.25 s apart: 1.2 s ... 4.0 s
        lst.onQueryProgress(_progress(b, 1.0 + 0.25 * b, 100 * b or None, 100 * (b + 1), 100 * (b + 1), ms=200))
    lst.onQueryTerminated(_terminated())
    assert lst.wait_terminated(1) and lst.flush(5)
    lst.stop()
    assert len(w.measurement("spark_progress")) == 12
    ends = [p.time_ns for p in w.measurement("backpressure")]
    assert [round((t - T0_NS) / S, 2) for t in ends] == [1.2, 2.2, 3.2]


def test_the_consumer_converts_a_burst_of_batches_in_one_go_not_one_wake_up_each():
    """At 25-50 batches a second a wake-up per record cost the driver CPU (docs/PERFORMANCE.md,
    "Design decisions": the listener's consumer)."""
    adds = []

    class CountingWriter(MemoryWriter):
        def add(self, points, rp=None):
            adds.append(1)
            return super().add(points, rp)

    w = CountingWriter()
    lst = SparkMetricsListener("r1", w, options=ListenerOptions(query_name="market-spread", poll_s=0.5)).start()
    lst.onQueryStarted(_started(0.0))
    for b in range(40):
        lst.onQueryProgress(_progress(b, 1.0 + 0.02 * b, 100 * b or None, 100 * (b + 1), 100 * (b + 1), ms=20))
    assert lst.flush(5)
    lst.stop()
    assert len(w.measurement("spark_progress")) == 40
    assert len(adds) <= 2, adds       # the burst arrived within one poll (two if it straddled one)


def test_failed_query_is_marked_with_its_truncated_error():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w).start()
    lst.onQueryStarted(_started())
    lst.onQueryTerminated(_terminated("boom " * 500))
    lst.stop()
    end = w.measurement("runs")[-1].fields
    assert end["status"] == "failed" and end["error"].startswith("boom") and len(end["error"]) == 500


def test_follows_only_its_query_and_ignores_late_events_of_earlier_runs():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w, options=ListenerOptions(query_name="market-spread")).start()
    lst.onQueryStarted(_started(name="other", run_id=uuid.UUID(int=9)))
    lst.onQueryProgress(_progress(0, 1.0, None, 10, 10, name="other", run_id=uuid.UUID(int=9)))
    lst.onQueryStarted(_started())
    lst.onQueryProgress(_progress(7, 1.0, 0, 10, 10, run_id=uuid.UUID(int=8)))   # an earlier run's last batch
    lst.onQueryProgress(_progress(0, 1.0, None, 20, 20))
    lst.onQueryTerminated(_terminated(run_id=uuid.UUID(int=9)))
    lst.stop()
    assert [p.fields["events"] for p in w.measurement("spark_progress")] == [20]
    assert [p.fields["status"] for p in w.measurement("runs")] == ["running"]
    assert not lst.wait_terminated(0)


def test_attached_after_start_marks_the_run_from_its_first_batch():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w, options=ListenerOptions(query_name="market-spread")).start()
    lst.onQueryProgress(_progress(4, 3.0, 100, 200, 200))
    lst.onQueryTerminated(_terminated())
    lst.stop()
    runs = w.measurement("runs")
    assert [p.fields["status"] for p in runs] == ["running", "stopped"]
    assert runs[0].time_ns == runs[1].time_ns == T0_NS + 3 * S
    # no known start: a full 10 s window, not a 100 % busy first batch
    assert w.measurement("backpressure")[0].fields["busy_share"] == pytest.approx(0.04)
    assert "phase" not in w.measurement("spark_progress")[0].tags     # not the run's first batch: no start-up


def test_bad_events_are_counted_logged_once_and_never_raise(caplog):
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w).start()
    with caplog.at_level(logging.ERROR, logger="spark_listener.listener"):
        for _ in range(3):
            lst.onQueryProgress(NS(progress=NS(runId=RID, name=None, id=QID, timestamp="not a time")))
        lst.onQueryStarted(NS())
    lst.onQueryProgress(_progress(0, 1.0, None, 5, 5))
    lst.stop()
    assert lst.failures == 4
    assert len([r for r in caplog.records if "logged once" in r.getMessage()]) == 1
    assert [p.fields["events"] for p in w.measurement("spark_progress")] == [5]


def test_callbacks_never_wait_for_a_stuck_writer():
    release = threading.Event()

    class StuckWriter(MemoryWriter):
        def add(self, points, rp=None):
            release.wait(10)
            super().add(points, rp)

    w = StuckWriter()
    lst = SparkMetricsListener("r1", w, options=ListenerOptions(max_pending=5)).start()
    t = time.monotonic()
    for i in range(50):
        lst.onQueryProgress(_progress(i, 1.0 + i, i * 10, i * 10 + 10, 1000))
    assert time.monotonic() - t < 1.0
    assert lst.dropped >= 39                   # the consumer holds at most 6, the queue 5
    release.set()
    lst.stop()
    assert len(w.measurement("spark_progress")) + lst.dropped == 50


def test_stop_drains_the_queue():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w)
    for i in range(20):
        lst.onQueryProgress(_progress(i, 1.0 + i, i * 10, i * 10 + 10, 1000))
    lst.start().stop()
    assert len(w.measurement("spark_progress")) == 20 and lst.dropped == 0


# ---------------------------------------------------------------------------------------------
# a real query through the project's replay, into a real InfluxDB


@pytest.mark.slow                   # a whole replay into InfluxDB, ~35 s
def test_real_query_writes_progress_and_run_to_influxdb(spark, influx_client, tmp_path):
    from engine.config import Config
    from engine.formats.log import read_head
    from engine.spark.job import QUERY_NAME
    from marketspread.replay import replay
    from engine.tools.generate import generate

    nbbo, orders, out = tmp_path / "nbbo.msg", tmp_path / "orders.msg", tmp_path / "out.msg"
    generate(nbbo, orders, symbols=50, nbbo=4_000, orders=4_000, seed=5)
    cfg = Config.from_env(state_dir=tmp_path / "state", max_rows_per_batch=2_000)
    run = "listener-it-" + uuid.uuid4().hex[:6]
    client = InfluxClient(influx_client.config)
    writer = InfluxWriter(client, tmp_path / "spool").start()
    # The source reports no latest offset (a simple stream reader): the ingress' head does.
    log_dir = cfg.state_dir / "replays" / run / "ingress"
    listener = SparkMetricsListener(run, writer, JobAdapter(latest_offset=lambda: read_head(log_dir)),
                                    options=ListenerOptions(query_name=QUERY_NAME)).start()
    spark.streams.addListener(listener)
    try:
        rep = replay([nbbo], [orders], out, cfg, spark=spark, ship_metrics=False, run_id=run, keep=True)
        # progress and termination reach listeners asynchronously, after the query stopped
        assert listener.wait_terminated(30), "no termination event"
    finally:
        spark.streams.removeListener(listener)
        listener.stop()
        assert writer.close(timeout=30)
    assert listener.failures == 0 and listener.dropped == 0

    def rows(q: str) -> list[dict]:
        return [r for s in influx_client.query(q, params={"run": run}) for r in s.rows()]

    deadline = time.monotonic() + 10
    while not (prog := rows('SELECT * FROM "spark_progress" WHERE "run" = $run')) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert rep.accepted == 50 + 8_000
    assert sum(r["events"] for r in prog) == rep.accepted
    assert len(prog) >= 4 and all(r["query"] == QUERY_NAME for r in prog)
    assert max(r["end_seq"] for r in prog) == rep.accepted and prog[-1]["backlog"] == 0
    assert all(r["input_blocks"] < r["events"] for r in prog if r["events"])     # blocks, not events
    runs = rows('SELECT * FROM "runs" WHERE "run" = $run')
    assert len(runs) == 1 and runs[0]["status"] == "stopped"          # the replay stops its query at the end
    assert runs[0]["events"] == rep.accepted and runs[0]["end_ns"] > runs[0]["start_ns"]
    bp = rows('SELECT * FROM "backpressure" WHERE "run" = $run')
    # one per second of batches (the first batch's included), not one per batch
    assert 1 <= len(bp) <= len(prog) and all(0 <= r["busy_share"] <= 1 and r["step"] == "job" for r in bp)


# ---------------------------------------------------------------------------------------------
# every end of a run: finished, stopped, failed with its reason; the heartbeat


FAILURES = __import__("pathlib").Path(__file__).parent / "data" / "failures"


def test_a_failed_run_gets_the_class_message_and_user_trace_of_sparks_exception():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w).start()
    lst.onQueryStarted(_started())
    lst.onQueryTerminated(_terminated((FAILURES / "foreach_batch.txt").read_text()))
    lst.stop()
    end = w.measurement("runs")[-1]
    f = end.fields
    assert f["status"] == "failed" and f["error"] == "RuntimeError: bad batch 1: the upstream table is gone"
    assert (f["error_class"], f["error_message"]) == ("RuntimeError", "bad batch 1: the upstream table is gone")
    assert f["error_trace"].endswith('raise RuntimeError(f"bad batch {batch_id}: the upstream table is gone")')
    assert end.time_ns == w.measurement("runs")[0].time_ns


@pytest.mark.parametrize("trigger, status", [("AvailableNowTrigger$", "finished"), ("OneTimeTrigger$", "finished"),
                                             ("ProcessingTimeTrigger", "stopped"), (None, "stopped")])
def test_a_clean_end_is_finished_under_a_self_ending_trigger_else_stopped(trigger, status):
    w = MemoryWriter()
    asked = []
    lst = SparkMetricsListener("r1", w, hooks=SessionHooks(trigger=lambda qid: asked.append(qid) or trigger)).start()
    lst.onQueryStarted(_started())
    lst.onQueryTerminated(_terminated())
    lst.stop()
    assert asked == [str(QID)]                  # read once, at the start
    assert [p.fields["status"] for p in w.measurement("runs")] == ["running", status]


def test_an_open_run_beats_in_its_own_row_until_it_ends():
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w, options=ListenerOptions(poll_s=0.05, heartbeat_s=0.1)).start()
    lst.onQueryStarted(_started())
    lst.onQueryProgress(_progress(0, 1.0, None, 10, 10))
    deadline = time.monotonic() + 10
    while len([p for p in w.measurement("runs") if set(p.fields) == {"last_seen_ns"}]) < 2 \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    lst.onQueryTerminated(_terminated())
    assert lst.flush(5)
    time.sleep(0.3)
    lst.stop()
    runs = w.measurement("runs")
    beats = [p for p in runs if set(p.fields) == {"last_seen_ns"}]
    assert len(beats) >= 2 and runs[-1].fields["status"] == "stopped"
    assert {p.time_ns for p in runs} == {T0_NS} and {tuple(p.tags.items()) for p in runs} == {tuple(runs[0].tags.items())}
    seen = [p.fields["last_seen_ns"] for p in beats]
    assert seen == sorted(seen) and seen[0] >= runs[0].fields["last_seen_ns"]
    assert runs.index(beats[-1]) < len(runs) - 1          # none after the end


def test_runs_left_open_end_stopped_or_failed_with_the_reason_given():
    from spark_listener.failure import parse_failure
    w = MemoryWriter()
    lst = SparkMetricsListener("r1", w).start()
    other = uuid.UUID(int=3)
    lst.onQueryStarted(_started())
    lst.onQueryStarted(_started(run_id=other))
    lst.onQueryTerminated(_terminated(run_id=other))
    assert lst.open_run_ids == {str(RID)}
    reason = parse_failure('Traceback (most recent call last):\n  File "/u/job.py", line 4, in <module>\n'
                           '    main()\nConnectionError: warehouse unreachable\n')
    lst.end_open_runs(reason)
    lst.onQueryProgress(_progress(3, 5.0, 0, 10, 10))         # a late batch of the ended run
    assert lst.flush(5)
    lst.stop()
    ends = [p for p in w.measurement("runs") if p.fields.get("status") not in (None, "running")]
    assert [(p.tags["run_id"], p.fields["status"]) for p in ends] == [(str(other), "stopped"), (str(RID), "failed")]
    assert ends[1].fields["error"] == "ConnectionError: warehouse unreachable"
    assert ends[1].fields["error_trace"] == "/u/job.py:4 in <module>: main()"
    assert not w.measurement("spark_progress") and lst.open_run_ids == frozenset()


def test_a_stopped_session_ends_its_open_runs_stopped():
    w = MemoryWriter()
    alive = [True]
    lst = SparkMetricsListener("r1", w, hooks=SessionHooks(alive=lambda: alive[0]),
                               options=ListenerOptions(poll_s=0.05, heartbeat_s=0.1)).start()
    lst.onQueryStarted(_started())
    alive[0] = False
    deadline = time.monotonic() + 10
    while not any(p.fields.get("status") == "stopped" for p in w.measurement("runs")) and time.monotonic() < deadline:
        time.sleep(0.05)
    lst.stop()
    runs = w.measurement("runs")
    assert runs[-1].fields["status"] == "stopped" and runs[-1].time_ns == T0_NS and runs[-1].fields["end_ns"] > T0_NS
