"""How a run's end reads from its `runs` rows (pure): statuses, lost, the failure's reason."""
from __future__ import annotations

from collector.query.run_ends import (STATUS_LIVE, QueryEnd, RunError, newest, query_end, run_error,
                                      run_status_of)
from collector.run_status import LOST_AFTER_S
from collector.units import NS

NOW = 1_800_000_000 * NS


def test_split_fields_give_class_message_and_trace():
    err = run_error({"error_class": "RuntimeError", "error_message": "boom in batch 15",
                     "error_trace": "  File \"job.py\", line 12, in enrich\n\n  File \"job.py\", line 3, in f",
                     "error": "RuntimeError: boom in batch 15"})
    assert err == RunError("RuntimeError", "boom in batch 15",
                           ('  File "job.py", line 12, in enrich', '  File "job.py", line 3, in f'))
    assert err.short == "RuntimeError: boom in batch 15"


def test_an_older_rows_bare_error_is_split_at_its_class():
    old = run_error({"error": "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] x: y"})
    assert old == RunError("pyspark.errors.exceptions.captured.StreamingQueryException", "[STREAM_FAILED] x: y")
    assert run_error({"error": "py4j preamble without a class"}) == RunError("", "py4j preamble without a class")
    assert run_error({"error": ""}) is None and run_error({}) is None and run_error({"error": 12}) is None


def test_a_running_row_is_live_until_its_newest_sign_of_life_is_older_than_lost_after():
    fresh = NOW - int((LOST_AFTER_S - 1) * NS)
    stale = NOW - int((LOST_AFTER_S + 1) * NS)
    assert query_end("running", None, None, fresh, NOW) == QueryEnd(STATUS_LIVE, None, None, fresh)
    assert query_end("running", None, None, stale, NOW) == QueryEnd("lost", None, None, stale)
    assert query_end(None, None, None, None, NOW).status == STATUS_LIVE      # nothing to judge by: never lost
    assert newest(None, stale, fresh, None) == fresh and newest(None) is None


def test_ended_rows_keep_their_status_and_end_and_a_failure_always_has_a_reason():
    err = RunError("E", "m")
    assert query_end("failed", 5, err, 4, NOW) == QueryEnd("failed", 5, err, 4)
    assert query_end("stopped", 5, err, 4, NOW) == QueryEnd("stopped", 5, None, 4)
    assert query_end("finished", 5, None, None, NOW).status == "finished"
    assert query_end("failed", 5, None, 4, NOW).error.message.startswith("the query failed")


def test_a_runs_status_is_its_most_telling_querys():
    live, lost = QueryEnd(STATUS_LIVE, None, None, 9), QueryEnd("lost", None, None, 3)
    failed, stopped = QueryEnd("failed", 7, RunError("E", "m"), 7), QueryEnd("stopped", 8, None, 8)
    assert run_status_of([stopped, live, failed, lost]) is failed
    assert run_status_of([stopped, lost, live]) is live
    assert run_status_of([stopped, lost]) is lost
    newer = QueryEnd("stopped", 9, None, 9)
    assert run_status_of([stopped, newer]) is newer
    assert run_status_of([]) is None
