"""A query that raises in its tenth batch, end to end: the real monitor records why, and the run's page in a
real Chromium says `failed` with the exception's class, its message and the user's code line within 10 s
of Spark reporting the failure."""
from __future__ import annotations

import time

import pytest

from spark_listener import monitor

pytestmark = pytest.mark.slow            # a real streaming query of ~15 batches


class BookingError(RuntimeError):
    """The user's own exception, raised in the user's own function."""


def _settle_bookings(df, batch_id):
    if batch_id == 9:
        raise BookingError(f"ledger rejected batch {batch_id}: <b>balance</b> below zero")


def test_a_query_that_raises_shows_failed_with_its_reason_on_its_page(spark, tmp_path, influx_client, ui_app,
                                                                          dash_duo):
    with monitor(spark, run="failing-app", influx=influx_client.config, state_dir=tmp_path / "state",
                 spool_dir=tmp_path / "spool", alerts=False) as mon:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 20).load().writeStream
             .queryName("bookings").foreachBatch(_settle_bookings)
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
        with pytest.raises(Exception, match="ledger rejected batch 9"):
            q.awaitTermination(120)
        failed_at = time.monotonic()
        assert mon.listener.wait_terminated(10)
        dash_duo.start_server(ui_app)
        dash_duo.wait_for_page(f"{dash_duo.server_url}/run/bookings", timeout=10)
        # the page refreshes on its own: the failure shows without a reload once it is written
        dash_duo.wait_for_contains_text("#job-end", "ledger rejected batch 9", timeout=max(1.0, 10 - (
            time.monotonic() - failed_at)))
    panel = dash_duo.find_element("#job-end").text
    assert "BookingError" in panel and "<b>balance</b> below zero" in panel    # text, never markup
    assert "_settle_bookings" in panel or "test_failed_run_page.py" in panel   # the user's code line
    assert dash_duo.find_elements("#job-end b") == []
