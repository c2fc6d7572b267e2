"""Any query's figures from its progress: sources, state operators, watermark, rows behind, points."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.streaming.listener import QueryProgressEvent

from collector.backpressure import HIGH, LOW, OK, BatchSpan, query_figures
from collector.testing import MemoryWriter
from spark_listener import ListenerOptions, SessionHooks, SparkMetricsListener
from spark_listener.points import progress_point, source_points, state_points
from spark_listener.query_figures import rows_behind, short_name
from spark_listener.records import parse_timestamp_ns, progress_record

DATA = Path(__file__).parent / "data"
S = 1_000_000_000


def _rate_window_progress(**changes):
    """A real progress of a rate source -> watermarked window count (captured from Spark 4)."""
    raw = json.loads((DATA / "progress_rate_window.json").read_text())
    raw.update(changes)
    return QueryProgressEvent.fromJson({"progress": raw}).progress


def test_a_rate_window_querys_figures():
    p = _rate_window_progress()
    r = progress_record("win", p, prev_ts_ns=None)
    assert r.events is None and r.backlog is None              # no seq offsets: not Market Spread
    assert (r.input_rows_per_s, r.processed_rows_per_s) == (200.0, 657.9)
    assert r.watermark_ns == parse_timestamp_ns("2026-11-28T12:21:08.556Z")
    assert r.late_rows == 0 and r.rows_behind == 0
    (src,) = r.sources
    assert (src.source, src.input_rows, src.input_rows_per_s) == ("0:RateStreamV2", 200, 200.0)
    (op,) = r.operators
    assert (op.operator, op.rows_total, op.rows_updated, op.rows_removed, op.memory_bytes) == \
        ("0:stateStoreSave", 2, 1, 1, 2752)


def test_points_carry_the_generic_fields_and_the_trigger():
    r = progress_record("win", _rate_window_progress(batchDuration=1500), prev_ts_ns=None)
    f = progress_point(r, trigger_ms=1000).fields
    assert f["input_rows"] == 200 and f["input_rows_per_s"] == 200.0 and f["processed_rows_per_s"] == 657.9
    assert (f["trigger_ms"], f["overran"]) == (1000, 1)
    assert f["watermark_delay_ms"] == (r.ts_ns - r.watermark_ns) // 1_000_000 == 3444
    assert "trigger_ms" not in progress_point(r).fields and "overran" not in progress_point(r).fields
    (sp,) = source_points(r)
    ids = {"query_id": r.query_id, "run_id": r.run_id}
    assert sp.tags == {"run": "win", "query": "win", "source": "0:RateStreamV2", **ids} and sp.fields["input_rows"] == 200
    assert progress_point(r).tags == {"run": "win", "query": "win", **ids}
    (st,) = state_points(r)
    assert st.tags["operator"] == "0:stateStoreSave" and st.fields["memory_bytes"] == 2752


@pytest.mark.parametrize("desc,end,latest,behind", [
    ("RateStreamV2[rowsPerSecond=200, rampUpTimeSeconds=0", 10, 13, 600),     # offsets are seconds
    ("KafkaV2[Subscribe[t]]", '{"t":{"0":5,"1":7}}', '{"t":{"0":9,"1":7}}', 4),
    ("PythonMicroBatchStream", '{"seq":100}', '{"seq":250}', 150),
    ("FileStreamSource[file:/x]", '{"logOffset":3}', '{"logOffset":5}', None),  # batches, not rows
    ("MemoryStream[value#1]", 3, 5, None),
    ("KafkaV2[Subscribe[t]]", '{"t":{"0":5}}', "None", None),
    ("KafkaV2[Subscribe[t]]", "not json", '{"t":{"0":9}}', None),
])
def test_rows_behind_where_the_offsets_tell(desc, end, latest, behind):
    assert rows_behind(desc, end, latest) == behind


def test_source_names_are_bounded_tags():
    assert short_name("RateStreamV2[rowsPerSecond=1") == "RateStreamV2"
    assert short_name("<script>alert(1)</script>") == "source"
    assert short_name("../../etc") == "source"
    assert len(short_name("A" * 10_000)) == 60


def _batches(n, batch_ms, rows, behind=None, every_ms=1000):
    out = []
    for i in range(n):
        ts = i * every_ms * 1_000_000
        b = BatchSpan(ts + batch_ms * 1_000_000, batch_ms)
        out.append(type("B", (), {"ts_ns": ts, "end_ns": b.end_ns, "batch_ms": batch_ms, "input_blocks": rows,
                                  "rows_behind": None if behind is None else behind(i)})())
    return out


def test_query_backpressure_as_spark_users_read_it():
    end = 10 * S
    calm = query_figures(_batches(10, 300, 200), end, trigger_ms=1000)
    assert calm.status == OK and calm.overrun_share == 0.0
    assert calm.input_rows_per_s == pytest.approx(2000 / 10) and calm.processed_rows_per_s == pytest.approx(2000 / 3)
    some = query_figures(_batches(10, 300, 200)[:7] + _batches(10, 1200, 200)[7:], end, trigger_ms=1000)
    assert some.status == LOW and some.overrun_share == pytest.approx(2 / 9, abs=0.12)
    over = query_figures(_batches(10, 1500, 200), 16 * S, trigger_ms=1000)
    assert over.status == HIGH and over.overrun_share == 1.0
    # no trigger: batches back to back while the rows behind grow
    behind = query_figures(_batches(12, 1000, 2000, behind=lambda i: 100 * i), 12 * S, trigger_ms=None)
    assert behind.overrun_share is None and behind.status == HIGH and behind.backlog_growth_per_s > 0
    keeping_up = query_figures(_batches(12, 1000, 2000, behind=lambda i: 100), 12 * S, trigger_ms=None)
    assert keeping_up.status == OK


def test_listener_tags_each_query_with_its_run_and_asks_its_trigger_once():
    w = MemoryWriter()
    asked = []

    def info(qid):
        asked.append(qid)
        return 1000, {"app_id": "local-1", "steps": '["enrich"]'}

    lst = SparkMetricsListener(lambda name, qid: name or "app", w,
                               hooks=SessionHooks(query_info=info, batch_points=lambda rec: []),
                               options=ListenerOptions(backpressure_every_s=0)).start()
    p = _rate_window_progress()
    lst.onQueryProgress(QueryProgressEvent(p))
    lst.onQueryProgress(QueryProgressEvent(_rate_window_progress(batchId=12, batchDuration=1500,
                                                                 timestamp="2026-11-28T12:21:13.000Z")))
    lst.stop()
    assert len(asked) == 1
    (run,) = w.measurement("runs")
    assert run.tags == {"run": "win", "query": "win", "run_id": str(p.runId)} and run.fields["app_id"] == "local-1"
    assert run.fields["query_id"] == str(p.id)
    prog = w.measurement("spark_progress")
    assert [p.fields["overran"] for p in prog] == [0, 1] and all(p.fields["trigger_ms"] == 1000 for p in prog)
    assert len(w.measurement("spark_source")) == 2 and len(w.measurement("spark_state")) == 2
    bp = w.measurement("backpressure")
    assert bp[-1].fields["overrun_share"] == 0.5 and bp[-1].fields["status"] == LOW


def test_a_hundred_queries_each_keep_their_own_run_and_figures():
    import uuid
    w = MemoryWriter()
    lst = SparkMetricsListener(lambda name, qid: name or "app", w, options=ListenerOptions(backpressure_every_s=0)).start()
    for i in range(100):
        qid, rid = uuid.UUID(int=1000 + i), uuid.UUID(int=2000 + i)
        name = f"q{i}" if i % 2 else None            # every other query has no name
        for b in range(3):
            lst.onQueryProgress(QueryProgressEvent(_rate_window_progress(
                id=str(qid), runId=str(rid), name=name, batchId=b, timestamp=f"2026-11-28T12:21:{10 + b:02d}.000Z")))
    lst.stop()
    assert lst.dropped == 0 and lst.failures == 0
    progress = w.measurement("spark_progress")
    assert len(progress) == 300
    assert {p.tags["run"] for p in progress} == {"app"} | {f"q{i}" for i in range(1, 100, 2)}
    assert len({p.tags["query"] for p in progress}) == 100           # the unnamed ones by their ids
    assert len(w.measurement("runs")) == 100 and len(w.measurement("spark_source")) == 300
