"""`alerts.job_names`, the pure decisions: which job is refused, which figure needs which points, the notes."""
from __future__ import annotations

import pytest

from alerts.job_names import MAX_JOBS_LISTED, NEW_JOB_FLAG, Need, check_job, missing_note, needs
from alerts.rules import Rule
from collector.vocabulary import (BACKPRESSURE, FIELD_COUNT, LATENCY, SPARK_EXECUTOR, SPARK_PROGRESS, SPARK_SOURCE,
                                  SPARK_STATE, STEP_E2E, STEP_JOB)


def _rule(**kw) -> Rule:
    return Rule.from_dict({"name": "r", "condition": "p99 > 5ms", **kw})


def test_a_known_job_or_no_job_passes_and_an_unknown_one_is_refused_with_the_newest_known():
    jobs = ("orders-enrich", "clicks", "market-spread-1")          # newest first, as known_jobs returns them
    assert check_job(_rule(job="clicks"), jobs) is None
    assert check_job(_rule(), ()) is None
    with pytest.raises(ValueError) as e:
        check_job(_rule(job="orders-enrch"), jobs)
    assert str(e.value) == ("rule 'r': job 'orders-enrch' is unknown; did you mean 'orders-enrich'? known jobs, "
                            "newest first: orders-enrich, clicks, market-spread-1 "
                            f"(for a job that has not run yet, add {NEW_JOB_FLAG})")
    with pytest.raises(ValueError, match=r"^rule 'r': job 'x' is unknown: no job has written metrics to this "
                                         r"InfluxDB yet \(use the form's switch\)$"):
        check_job(_rule(job="x"), (), hint="use the form's switch")


def test_a_long_list_of_jobs_is_cut_to_the_newest_and_counts_the_rest():
    jobs = tuple(f"job{i:02d}" for i in range(MAX_JOBS_LISTED + 7))
    with pytest.raises(ValueError) as e:
        check_job(_rule(job="zzz"), jobs)
    listed = str(e.value).split("newest first: ")[1]
    assert listed.startswith("job00, job01, ") and f"job{MAX_JOBS_LISTED - 1:02d} and 7 more (" in listed
    assert f"job{MAX_JOBS_LISTED:02d}" not in listed
    assert "\n" not in str(e.value)


def test_a_new_job_is_accepted_with_a_note():
    assert check_job(_rule(job="tomorrow"), ("today",), new_job=True) == \
        ("rule 'r': job 'tomorrow' has no data yet; accepted as a job that has not run yet, it reads as no data "
         "until it runs")
    assert check_job(_rule(job="today"), ("today",), new_job=True) is None


def test_each_condition_kind_needs_the_points_it_is_read_from():
    assert needs(_rule(job="j")) == (Need(LATENCY, FIELD_COUNT, (("run", "j"), ("step", STEP_E2E)), "p99"),)
    assert needs(_rule(condition="throughput < 10k/s", step="sink")) == \
        (Need(LATENCY, FIELD_COUNT, (("step", "sink"),), "throughput"),)
    assert needs(_rule(condition="backlog > 1M", job="j")) == \
        (Need(BACKPRESSURE, None, (("run", "j"), ("step", STEP_JOB)), "backlog"),)
    # a Spark query's figure: at the level the rule reads it, the field of alerts.figures
    assert needs(_rule(condition="state_rows > 1M", job="j", query="q")) == \
        (Need(SPARK_PROGRESS, "state_rows", (("run", "j"), ("query", "q")), "state_rows"),)
    assert needs(_rule(condition="state_rows > 1M", operator="0:stateStoreSave")) == \
        (Need(SPARK_STATE, "rows_total", (("operator", "0:stateStoreSave"),), "state_rows"),)
    assert needs(_rule(condition="files_behind > 10", job="j", source="0:FileStreamSource")) == \
        (Need(SPARK_SOURCE, "files_behind", (("run", "j"), ("source", "0:FileStreamSource")), "files_behind"),)
    assert needs(_rule(condition="heap_used > 1GB", app="local-1")) == \
        (Need(SPARK_EXECUTOR, "heap_used_bytes", (("app", "local-1"),), "heap_used"),)
    # figure op figure: both fields, each written by the same batches
    assert [n.field for n in needs(_rule(condition="batch_duration > trigger", job="j"))] == ["batch_ms", "trigger_ms"]


def test_notes_say_who_never_reported_what_and_what_to_do():
    def note(**kw) -> str:
        rule = _rule(**kw)
        return missing_note(rule, needs(rule)[-1])
    assert note(job="orders") == ("rule 'r': job orders reports no latency steps; p99 has no data until it records "
                                  "some (record_latency/timed_step)")
    assert note() == ("rule 'r': no job reports step start-to-end's latency; p99 has no data until it records some "
                      "(record_latency/timed_step)")
    assert note(condition="state_rows > 1M", job="orders") == \
        "rule 'r': job orders has no stateful operator; state_rows stays empty"
    assert note(condition="max(late_rows) > 0") == "rule 'r': no job has a stateful operator yet; late_rows stays empty"
    assert note(condition="batch_duration > trigger", job="orders", query="q1") == \
        ("rule 'r': job orders query q1 has never reported trigger (the query's trigger interval); "
         "the rule has no data until it does")
    assert note(condition="backpressure > 50%", job="orders") == \
        "rule 'r': job orders reports no backpressure yet; backpressure has no data until it does"
    assert note(condition="heap_used > 1GB") == ("rule 'r': no executor has reported heap_used yet (Spark's metrics "
                                                 "system sends it); the rule has no data until it does")
