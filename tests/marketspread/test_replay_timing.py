"""The replay's timing breakdown, from progress reports as Spark writes them."""
from __future__ import annotations

from marketspread.replay_timing import ReplayMoments, batch_spans, replay_timing


def _progress(batch: int, ts: str, ms: int, lo, hi) -> dict:
    start = "null" if lo is None else f'{{"seq":{lo}}}'
    return {"batchId": batch, "timestamp": ts,
            "durationMs": {"triggerExecution": ms, "addBatch": ms * 0.8, "walCommit": 5, "queryPlanning": 50},
            "sources": [{"startOffset": start, "endOffset": f'{{"seq":{hi}}}'}]}


def test_breakdown_separates_the_first_batch_from_the_steady_ones():
    progress = [_progress(2, "2026-01-01T00:00:12.000Z", 500, 600, 1000),
                _progress(0, "2026-01-01T00:00:05.000Z", 5000, None, 100),
                _progress(1, "2026-01-01T00:00:10.000Z", 700, 100, 600),
                _progress(3, "2026-01-01T00:00:13.000Z", 10, 1000, 1000)]      # read nothing
    spans = batch_spans(progress)
    assert [(s.batch_id, s.records) for s in spans] == [(0, 100), (1, 500), (2, 400)]
    t = 1767225600.0                                     # 2026-01-01T00:00:00Z
    m = ReplayMoments(start=t, session_built=t + 3, query_started=t + 4, ingest_start=t + 4, ingested=t + 6, consumed=t + 13,
                      end=t + 13.5)
    timing = replay_timing(m, spans)
    assert (timing.total_s, timing.startup_s, timing.session_s, timing.ingest_s, timing.wait_s) == (13.5, 4, 3, 2, 1)
    assert (timing.first_batch_s, timing.first_batch_records, timing.records) == (5.0, 100, 1000)
    assert timing.first_batch_phases == (("addBatch", 4.0), ("queryPlanning", 0.05), ("walCommit", 0.005))
    assert (timing.steady_batches, timing.steady_total_s, timing.steady_median_s) == (2, 1.2, 0.6)
    assert (timing.drain_s, timing.finish_s) == (7, 0.5)
    lines = timing.summary().splitlines()
    assert "Spark session (3.00 s)" in lines[1]
    assert lines[4].endswith("100 records, addBatch 4.00, queryPlanning 0.05, walCommit 0.01")
    assert lines[5].endswith("2 batches, median 0.60 s; first / median 8.3")
    assert lines[0] == "replay timing: 13.5 s wall"
    assert [ln.split()[0] for ln in lines[1:]] == ["start-up", "ingest", "to", "first", "steady", "drain",
                                                  "finish"]


def test_breakdown_of_a_replay_without_batches():
    m = ReplayMoments(1.0, 1.5, 2.0, 2.0, 3.0, 3.0, 3.5)
    timing = replay_timing(m, batch_spans([]))
    assert timing.first_batch_s == 0 and timing.steady_batches == 0 and timing.records == 0
    assert "first batch" in timing.summary() and "first / median" not in timing.summary()
