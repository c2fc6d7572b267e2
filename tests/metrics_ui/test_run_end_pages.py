"""How runs ended, in a real headless Chromium against a real InfluxDB: failed with its reason, lost, stopped
on the runs page; the failure's panel on the job page, hostile text shown as text; the last minute's throughput."""
from __future__ import annotations

import time

from collector.influx.server import free_port
from collector.run_status import LOST_AFTER_S
from collector.units import NS

from ..collector.query.run_rows import batches, runs_row, seconds_ago
from .test_generic_pages import _row
from .test_pages import TIMEOUT

HOSTILE = ('<b>bold</b> <script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> '
           '**strong** [a link](http://evil.example/) & done')
TRACE = '  File "/home/u/job.py", line 41, in enrich\n    raise ValueError(f"<i>{row}</i>")'
_MARKUP = ("b", "i", "img", "script", "a", "strong")


def _markup_in(dash_duo, scope: str) -> int:
    """Return how many elements the hostile text would have made inside `scope`, were it read as markup."""
    return dash_duo.driver.execute_script(
        "return document.querySelectorAll(arguments[0]).length;", ", ".join(f"{scope} {m}" for m in _MARKUP))


def test_runs_page_and_job_page_say_how_each_run_ended(dash_duo, ui_app, influx_client):
    now = time.time_ns()
    t0, t1 = seconds_ago(now, 400), seconds_ago(now, 180)
    lost_seen = seconds_ago(now, LOST_AFTER_S + 60)
    sizes = [500 + 13 * (i % 7) + (1500 if i >= 140 else 0) for i in range(180)]
    influx_client.write([
        runs_row("failing", t0, "failed", end_ns=t0 + 16 * NS, last_seen_ns=t0 + 16 * NS, error_class="ValueError",
                 error_message=HOSTILE, error=f"ValueError: {HOSTILE}"[:500], error_trace=TRACE),
        *batches("failing", t0, 15, 100),
        runs_row("killed", t0, last_seen_ns=lost_seen), *batches("killed", t0, 5, 100),
        runs_row("halted", t0, "stopped", end_ns=t0 + 30 * NS, last_seen_ns=t0 + 30 * NS),
        *batches("halted", t0, 28, 100),
        runs_row("steady", t1, last_seen_ns=seconds_ago(now, 1)), *batches("steady", t1, 180, sizes, batch_ms=500),
    ])
    dash_duo.start_server(ui_app, port=free_port())

    failed = _row(dash_duo, "#runs-table", "failing")
    assert failed[1].startswith("failed ValueError: <b>bold</b> <script>"), failed
    assert failed[1].endswith("…") and len(failed[1]) < len(HOSTILE)          # the message cut short ...
    title = dash_duo.driver.execute_script(
        "return document.querySelector('#runs-table .run-error').getAttribute('title');")
    assert title == f"ValueError: {HOSTILE}"                                    # ... and whole in its tooltip
    hhmmss = time.strftime("%H:%M:%S", time.gmtime(lost_seen / NS))
    assert _row(dash_duo, "#runs-table", "killed")[1] == f"lost: no word from the driver since {hhmmss}"
    assert _row(dash_duo, "#runs-table", "halted")[1] == "stopped"
    steady = _row(dash_duo, "#runs-table", "steady")
    end = t1 + 179 * NS + 500 * 1_000_000
    expected = sum(n for i, n in enumerate(sizes) if t1 + i * NS >= end - 60 * NS) / 60
    rate = float(steady[5].removesuffix(" rows/s").replace(",", ""))
    assert steady[1] == "live" and abs(rate - expected) <= 0.01 * expected, (steady, expected)
    assert _markup_in(dash_duo, "#runs-table .run-status") == 0
    assert dash_duo.driver.execute_script("return window.__pwned === undefined;")

    # the failed run's page: its reason at the top, the user's trace lines, all as text
    dash_duo.find_element("#runs-table a[href='/run/failing?run=r1']").click()        # the link names its run
    dash_duo.wait_for_text_to_equal("#job-end-reason", f"ValueError: {HOSTILE}", timeout=TIMEOUT)
    assert dash_duo.find_element("#job-end-trace").get_attribute("textContent") == TRACE
    ended = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((t0 + 16 * NS) / NS))
    dash_duo.wait_for_contains_text("#job-end", f"Failed at {ended} UTC", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-title", "failed", timeout=TIMEOUT)
    assert _markup_in(dash_duo, "#job-end") == 0
    assert dash_duo.driver.execute_script("return window.__pwned === undefined;")


def test_job_pages_of_a_lost_and_a_stopped_run_say_so(dash_duo, ui_app, influx_client):
    now = time.time_ns()
    t0 = seconds_ago(now, 300)
    lost_seen = seconds_ago(now, LOST_AFTER_S + 90)
    influx_client.write([runs_row("killed", t0, last_seen_ns=lost_seen), *batches("killed", t0, 5, 100),
                         runs_row("halted", t0, "stopped", end_ns=t0 + 30 * NS), *batches("halted", t0, 28, 100),
                         runs_row("running", seconds_ago(now, 10), last_seen_ns=seconds_ago(now, 1)),
                         *batches("running", seconds_ago(now, 10), 10, 100)])
    dash_duo.start_server(ui_app, port=free_port())
    seen = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(lost_seen / NS))
    dash_duo.wait_for_page(dash_duo.server_url + "/run/killed")
    dash_duo.wait_for_contains_text("#job-end-reason", f"No word from the driver since {seen} UTC", timeout=TIMEOUT)
    dash_duo.wait_for_page(dash_duo.server_url + "/run/halted")
    ended = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((t0 + 30 * NS) / NS))
    dash_duo.wait_for_text_to_equal("#job-end-reason", f"Stopped at {ended} UTC", timeout=TIMEOUT)
    dash_duo.wait_for_contains_text("#job-summary", f"stopped at {ended} UTC", timeout=TIMEOUT)
    dash_duo.wait_for_page(dash_duo.server_url + "/run/running")
    dash_duo.wait_for_contains_text("#job-summary", "live", timeout=TIMEOUT)
    assert dash_duo.find_elements("#job-end .run-end") == []
