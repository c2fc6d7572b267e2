"""parse_failure: the reason of a failed run, from the exception texts real Spark queries gave.

The texts in data/failures/ were written by data/failures/make_failures.py: queries that
raise in foreachBatch, in a UDF and mapInPandas inside a task, on the driver (a bad
column), with a chained exception, and in the JVM (ANSI division by zero).
"""
from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from collector.run_status import FIELD_ERROR, FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE
from spark_listener.failure import MAX_MESSAGE_CHARS, MAX_TRACE_LINES, NOT_USER_CODE, FailureReason, parse_failure

DATA = Path(__file__).parent / "data" / "failures"
SCRIPT = "make_failures.py"


def _text(name: str) -> str:
    return (DATA / f"{name}.txt").read_text()


@pytest.mark.parametrize("name, cls, message, code", [
    ("foreach_batch", "RuntimeError", "bad batch 1: the upstream table is gone",
     'raise RuntimeError(f"bad batch {batch_id}: the upstream table is gone")'),
    ("udf", "ValueError", "value 4 is out of range for the tariff",
     'raise ValueError(f"value {v} is out of range for the tariff")'),
    ("map_in_pandas", "KeyError", "'missing_column_in_lookup'", 'raise KeyError("missing_column_in_lookup")'),
])
def test_a_python_exception_in_the_users_code_gives_its_class_message_and_line(name, cls, message, code):
    r = parse_failure(_text(name))
    assert (r.error_class, r.message) == (cls, message)
    assert len(r.trace) == 1 and r.trace[0].endswith(code) and f"{SCRIPT}:" in r.trace[0]
    assert r.summary == f"{cls}: {message}"


def test_pyspark_py4j_and_installed_packages_are_not_the_users_frames():
    text = _text("foreach_batch")
    assert "bad batch 1" not in text[:500]          # where the stored error used to end
    assert "py4j/clientserver.py" in text and "pyspark/sql/utils.py" in text
    assert not any("py4j" in t or "pyspark" in t for t in parse_failure(text).trace)


def test_a_bad_column_on_the_driver_gives_sparks_analysis_exception_and_the_users_line():
    r = parse_failure(_text("driver_bad_column"))
    assert r.error_class == "pyspark.errors.exceptions.captured.AnalysisException"
    assert r.message.startswith("[UNRESOLVED_COLUMN.WITH_SUGGESTION]") and "no_such_column" in r.message
    assert "\tat " not in r.message
    assert [t.split(": ", 1)[1] for t in r.trace] == ['df.select("no_such_column").count()']


def test_a_chained_exception_gives_the_last_raised_with_the_frames_of_its_cause_first():
    r = parse_failure(_text("foreach_batch_chained"))
    assert (r.error_class, r.message) == ("ValueError", "no rate for currency EUR")
    assert [t.split(" in ", 1)[1].split(":")[0] for t in r.trace] == ["chained", "lookup", "chained"]


def test_a_jvm_exception_gives_its_class_and_message_without_the_stack():
    r = parse_failure(_text("jvm_divide_by_zero"))
    assert r.error_class == "org.apache.spark.SparkArithmeticException"
    assert r.message.startswith("[DIVIDE_BY_ZERO] Division by zero.") and "at org.apache" not in r.message
    assert r.trace == ()


def test_a_jvm_cause_is_read_from_its_deepest_caused_by():
    text = ("org.apache.spark.SparkException: Job aborted.\n\tat org.apache.spark.X.y(X.scala:1)\n"
            "Caused by: java.io.IOException: disk quota exceeded on /data\n\tat java.io.F.w(F.java:2)\n")
    r = parse_failure(text)
    assert (r.error_class, r.message) == ("java.io.IOException", "disk quota exceeded on /data")


def test_the_users_script_raising_is_read_the_same_way():
    def handler():
        raise ConnectionError("warehouse unreachable")
    try:
        handler()
    except ConnectionError as e:
        text = "".join(traceback.format_exception(e))
    r = parse_failure(text)
    assert (r.error_class, r.message) == ("ConnectionError", "warehouse unreachable")
    assert r.trace and r.trace[-1].endswith('raise ConnectionError("warehouse unreachable")')
    assert "test_failure.py:" in r.trace[-1] and " in handler: " in r.trace[-1]


def test_the_products_own_frames_are_not_the_users():
    product = next(p for p in NOT_USER_CODE if p.endswith("/spark_listener/"))
    text = (f'Traceback (most recent call last):\n  File "/home/u/job.py", line 3, in <module>\n    run()\n'
            f'  File "{product}monitor.py", line 9, in stop\n    x()\nRuntimeError: boom\n')
    assert parse_failure(text).trace == ("/home/u/job.py:3 in <module>: run()",)


def test_the_message_and_the_trace_are_bounded_and_the_error_field_short():
    frames = "".join(f'  File "/home/u/job.py", line {n}, in f\n    f()\n' for n in range(50))
    r = parse_failure(f"Traceback (most recent call last):\n{frames}RecursionError: {'x' * 10_000}\n")
    assert len(r.message) == MAX_MESSAGE_CHARS and len(r.trace) == MAX_TRACE_LINES
    assert r.trace[-1].startswith("/home/u/job.py:49 ")
    f = r.fields()
    assert set(f) == {FIELD_ERROR, FIELD_ERROR_CLASS, FIELD_ERROR_MESSAGE, FIELD_ERROR_TRACE}
    assert len(f[FIELD_ERROR]) == 500 and f[FIELD_ERROR].startswith("RecursionError: xxx")
    assert f[FIELD_ERROR_TRACE].count("\n") == MAX_TRACE_LINES - 1


def test_no_text_is_no_reason_and_plain_text_is_a_message():
    assert parse_failure(None) is None and parse_failure("  \n") is None
    assert parse_failure("the query went away") == FailureReason("", "the query went away")
    assert parse_failure("the query went away").summary == "the query went away"
