"""The job page's Executors section says which executors were lost and which batches ran tasks again (Chromium)."""
from __future__ import annotations

import time

from collector.influx.lineproto import Point
from collector.influx.server import free_port
from collector.units import NS
from collector.vocabulary import SPARK_EXECUTOR, SPARK_EXECUTORS, SPARK_TASK_FAILURES

from ..collector.query.generic_run import generic_run
from .test_pages import TIMEOUT

APP = "app-20261128-0007"
REASON = "worker lost: 10.0.0.11:41235 got disassociated"


def _roster(run: str, t: int, active: int, lost: int, failed: int, last: str) -> Point:
    return Point(SPARK_EXECUTORS, {"run": run, "app": APP},
                 {"active": active, "lost": lost, "failed_tasks": failed, "last_lost": last}, t)


def test_lost_executor_and_retried_batch_on_the_job_page(dash_duo, ui_app, influx_client):
    now = time.time_ns() // NS * NS
    g = generic_run("cluster", now - 19 * NS, seconds=20, app=APP, latency=False)
    points = [p for p in g.points if p.measurement != SPARK_EXECUTOR]       # no metrics sink: the roster alone
    points += [_roster("cluster", now - 19 * NS, 2, 0, 0, ""), _roster("cluster", now - 9 * NS, 1, 1, 2, f"1 on "
               f"10.0.0.11:40001: {REASON}"), _roster("cluster", now - 2 * NS, 2, 1, 2, f"1 on 10.0.0.11:40001: {REASON}")]
    points.append(Point(SPARK_TASK_FAILURES, {"run": "cluster", "query": "cluster", "app": APP},
                        {"batch_id": 11, "failed_tasks": 2}, now - 8 * NS))
    influx_client.write(points)
    dash_duo.start_server(ui_app, port=free_port())
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/cluster")
    dash_duo.wait_for_contains_text("#job-executors-losses", "executors: 2 active, 1 lost", timeout=TIMEOUT)
    text = dash_duo.find_element("#job-executors-losses").text
    assert f"(last: 1 on 10.0.0.11:40001: {REASON})" in text and "batches whose tasks ran again: 11 (2 failed tasks)" \
        in text, text
    assert dash_duo.get_logs() == []
