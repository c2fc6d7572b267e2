"""Runs grouped by query and the run a page shows (pure)."""
from __future__ import annotations

from collector.query.run_groups import display_name, group_runs, pick_run, query_runs
from collector.query.series import RunInfo
from collector.units import NS


def _run(job: str, run_id: str | None, first_s: int, last_s: int, query: str | None = None,
         query_id: str | None = None) -> RunInfo:
    return RunInfo(job, first_s * NS, last_s * NS, False, "stopped", 0, None, None, None, query_id,
                   run_id=run_id, query=query)


def test_runs_group_by_query_newest_first_and_names_never_merge():
    runs = [_run("orders", "r1", 0, 10, "orders", "q1"), _run("orders", "r2", 100, 110, "orders", "q1"),
            _run("coll_a", "r3", 20, 30, "coll/a", "q2"), _run("coll_a", "r4", 40, 50, "coll_a", "q3"),
            _run("app", "r5", 60, 70, "8c1f2a90-1111", "8c1f2a90-1111"),
            _run("app", "r6", 60, 71, "51d07e33-2222", "51d07e33-2222"),
            _run("ms-20240501", "r7", 5, 6, "market-spread", "q7"), _run("latency-only", None, 0, 200)]
    groups = group_runs(runs)
    assert [(g.name, [r.run_id for r in g.runs]) for g in groups] == [
        ("latency-only", [None]), ("orders", ["r2", "r1"]), ("app · 51d07e33", ["r6"]), ("app · 8c1f2a90", ["r5"]),
        ("coll_a", ["r4"]), ("coll/a", ["r3"]), ("ms-20240501", ["r7"])]
    assert display_name(runs[2]) == "coll/a" and display_name(runs[6]) == "ms-20240501"


def test_a_page_shows_the_run_asked_for_or_the_newest_and_its_querys_runs():
    runs = [_run("orders", "r1", 0, 10, "orders", "q1"), _run("orders", "r2", 100, 110, "orders", "q1"),
            _run("orders", "r9", 50, 60, "orders", "q9")]
    assert pick_run(runs, None).run_id == "r2" and pick_run(runs, "r1").run_id == "r1"
    assert pick_run(runs, "nope") is None and pick_run([], None) is None
    assert [r.run_id for r in query_runs(runs, runs[0])] == ["r2", "r1"]
