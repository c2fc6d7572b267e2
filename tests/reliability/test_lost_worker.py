"""A lost worker under load: Spark runs its tasks again, results stay exact, the worker comes back.

A real standalone cluster on loopback (bench/spark_cluster.py: a master, two 1-core
workers), the job on it with its metrics in a real InfluxDB and an alert rule
`executors_lost > 0` evaluated by the job itself. While senders load the ingress, worker 0
is SIGKILLed together with everything it started (its executor's JVM and that executor's
Python workers, found by process tree). Then:

- Spark notices and runs the lost tasks on the other executor: the job goes on committing
  and every result equals the reference over the recorded arrival order, none twice;
- the driver's REST API lists the executor as removed, and the job's `spark_executors` and
  `spark_task_failures` points (spark_listener/executors.py) say one executor lost and
  which batch had failed tasks; the rule fires (an `alert_events` point, state firing);
- the worker, started again with the same command, registers with the master (its JSON),
  gets a new executor of the running application, and that executor completes tasks (the
  driver's /api/v1/applications/<id>/allexecutors).

Prints: seconds from the kill to the executor's removal and to the next commit, batches
with failed tasks, events/s over the run.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from alerts.rules import Rule
from alerts.store import RuleStore
from collector.query.ranges import TimeRange
from collector.query.store import MetricsStore
from engine.tools.generate import generate

from .harness import (Proc, check_exact, drain, fleet_for, listening_sockets, log_tail, read_consumed,
                      session_members, start_ingress, start_job, start_sender, stop_gracefully, wait_until)
from .test_cluster import _java
from perf.spark_cluster import start_cluster
from metrics_ui.spark_components import QUERY_EXECUTORS, Frame, executors_section

RATE = 4_000                # messages/s per stream, looping over the files until the test stops the senders
MESSAGES = 50_000           # per stream, in the files
_UI = re.compile(r"MasterWebUI to [^,]+, and started at (http://[^\s]+)")


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _descendants(root: int) -> list[int]:
    """Return `root` and every process below it (by parent pid)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _driver_api(job: Proc) -> str:
    """The driver's REST API base URL: its UI's port, 4040 or one of Spark's 16 retries above it."""
    def probe():
        socks = [s for pid in session_members(job.popen.pid) for s in listening_sockets(pid)]
        for addr, port in socks:
            if not 4040 <= port <= 4056:
                continue
            host = addr.removeprefix("::ffff:")
            host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
            try:
                _get_json(f"http://{host}:{port}/api/v1/applications")
                return f"http://{host}:{port}/api/v1"
            except (OSError, ValueError, http.client.HTTPException):
                continue
        return None
    return wait_until(probe, 60, "the driver's UI (MS_SPARK_UI=true) to answer", [job], interval=0.5)


def _query(client, q: str, params: dict | None = None) -> list[dict]:
    return [dict(zip(s.columns, v)) for s in client.query(q, params) for v in s.values]


def test_lost_worker_is_rescheduled_and_comes_back(tmp_path, influx_client):
    java = _java()
    data = tmp_path / "data"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=350, nbbo=MESSAGES, orders=MESSAGES, wide_share=0.2, seed=34)
    state = tmp_path / "state"
    RuleStore(state / "alerts" / "rules.json").put(
        Rule.from_dict({"name": "lost-executor", "condition": "executors_lost > 0", "window": "2m"}))

    env = {"SPARK_LOCAL_IP": "127.0.0.1", "MS_SPARK_UI": "true", "MS_ALERTS_INTERVAL_S": "1",
           **influx_client.config.as_env()}
    fleet = fleet_for(tmp_path / "run", env)
    try:
        cluster = start_cluster(fleet, java, tmp_path, workers=2)
        master_ui = _UI.search(cluster.master.log_path.read_text()).group(1)
        ingress, ports = start_ingress(fleet, state, "--shards", 2)
        job = start_job(fleet, state, "--shards", 2, "--max-rows-per-batch", 10_000, master=cluster.url)
        api = _driver_api(job)
        app = _get_json(f"{api}/applications")[0]["id"]
        t_start, t_start_ns = time.monotonic(), time.time_ns()
        senders = [start_sender(fleet, ports[s], f, "--rate", RATE, "--loop", "--quiet", name=f"send-{s}")
                   for s, f in (("nbbo", nbbo), ("orders", orders))]

        # under load, with both executors running tasks
        def both_busy():
            ex = [e for e in _get_json(f"{api}/applications/{app}/allexecutors") if e["id"] != "driver"]
            return ex if len(ex) == 2 and all(e["totalTasks"] > 0 for e in ex) else None
        before = wait_until(both_busy, 90, "both executors to run tasks", [job, *senders])
        wait_until(lambda: read_consumed(state / "ingress") > 20_000, 60, "the job to commit under load", [job])

        worker = cluster.workers[0]
        executor = [p for p in _descendants(worker.popen.pid) if "CoarseGrainedExecutorBackend" in _cmdline(p)]
        assert len(executor) == 1, "worker 0 runs no executor"
        lost_id = re.search(r"--executor-id (\S+)", _cmdline(executor[0])).group(1)

        def active_tasks() -> int:
            return {e["id"]: e for e in _get_json(f"{api}/applications/{app}/allexecutors")}[lost_id]["activeTasks"]

        def frozen_in_a_task():
            # Kill it in the middle of a task, so that Spark must run that task again: freeze the
            # worker's tree while the driver sees a task running there, and keep it frozen only if
            # the driver still does (the task had not ended before the freeze).
            if active_tasks() == 0:
                return None
            tree = _descendants(worker.popen.pid)
            _signal(tree, signal.SIGSTOP)
            time.sleep(0.3)
            if active_tasks() > 0:
                return tree
            _signal(tree, signal.SIGCONT)
            return None
        tree = wait_until(frozen_in_a_task, 60, f"executor {lost_id} to be frozen in a task", [job], interval=0.02)
        python = [p for p in tree if Path(_cmdline(p).split(" ")[0]).name.startswith("python")]
        argv = Path(f"/proc/{worker.popen.pid}/cmdline").read_bytes().split(b"\0")[:-1]
        worker_env = dict(line.split(b"=", 1) for line in
                          Path(f"/proc/{worker.popen.pid}/environ").read_bytes().split(b"\0") if b"=" in line)
        consumed_at_kill = read_consumed(state / "ingress")
        _signal(tree, signal.SIGKILL)
        t_kill = time.monotonic()
        worker.popen.wait(timeout=30)

        def removed():
            ex = {e["id"]: e for e in _get_json(f"{api}/applications/{app}/allexecutors")}
            return ex[lost_id] if lost_id in ex and not ex[lost_id]["isActive"] else None
        gone = wait_until(removed, 60, f"executor {lost_id} to be removed", [job])
        t_removed = time.monotonic() - t_kill
        wait_until(lambda: read_consumed(state / "ingress") > consumed_at_kill, 60,
                   "a commit after the kill", [job])
        t_commit = time.monotonic() - t_kill

        # the worker comes back: the same command, the same environment
        log = fleet.log_dir / "worker-0-again.log"
        with open(log, "ab") as out:
            p = subprocess.Popen([a.decode() for a in argv], cwd=tmp_path, env={k.decode(): v.decode()
                                 for k, v in worker_env.items()}, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        fleet.procs.append(Proc("worker-0-again", p, log))
        t_back = time.monotonic()

        up: list[float] = []

        def new_executor_busy():
            ex = [e for e in _get_json(f"{api}/applications/{app}/allexecutors")
                  if e["id"] not in ("driver", *(b["id"] for b in before)) and e["isActive"]]
            if ex and not up:
                up.append(time.monotonic() - t_back)
            return ex[0] if ex and ex[0]["completedTasks"] > 0 else None
        fresh = wait_until(new_executor_busy, 120, "a new executor on the restarted worker to run tasks",
                           [job, fleet.procs[-1]])
        t_fresh = time.monotonic() - t_back
        masters = _get_json(f"{master_ui}/json/")
        alive = [w for w in masters["workers"] if w["state"] == "ALIVE"]
        assert len(alive) == 2, masters["workers"]
        assert list(cluster.work_dirs[0].glob(f"app-*/{fresh['id']}/stderr")), "the new executor is not worker 0's"

        time.sleep(2)
        for s in senders:                           # the load ends: what the ingress logged is the input
            assert s.alive(), log_tail(s.log_path)
            fleet.stop(s)
        assert stop_gracefully(fleet, ingress, 30) == 0
        drain(state, job, 180)
        t_drained = time.monotonic() - t_start
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
    finally:
        fleet.stop_all()

    ex = check_exact(state)
    assert ex.exact, ex
    assert ex.logged > 2 * MESSAGES
    assert gone["removeReason"], gone

    # what the job wrote: the lost executor, the batches with failed tasks, the alert
    roster = _query(influx_client, 'SELECT "active", "lost", "failed_tasks", "last_lost" FROM "spark_executors" '
                                   'WHERE "app" = $app', {"app": app})
    assert max(r["lost"] for r in roster) == 1, roster[-3:]
    assert roster[-1]["active"] == 2 and roster[-1]["last_lost"].startswith(f"{lost_id} on "), roster[-1]
    failed = _query(influx_client, 'SELECT "batch_id", "failed_tasks" FROM "spark_task_failures"')
    batches = sorted({r["batch_id"] for r in failed})
    assert batches and all(r["failed_tasks"] > 0 for r in failed), failed
    # the job page's Executors section, from what the job wrote
    rng = TimeRange(t_start_ns - 60 * 10**9, time.time_ns())
    view = MetricsStore(influx_client).executor_view(app, rng, 10)
    assert view.losses is not None and view.losses.lost == 1, view.losses
    assert [b for b, _ in view.losses.retried] == batches
    body = executors_section(view, Frame(rng, "r", [])).body
    line = next(c for c in body if getattr(c, "id", None) == f"{QUERY_EXECUTORS}-losses").children
    assert "2 active, 1 lost" in line and f"(last: {lost_id} on " in line and f": {batches[0]} (" in line, line
    events = _query(influx_client, 'SELECT "state" FROM "alert_events" WHERE "rule" = $rule',
                    {"rule": "lost-executor"})
    assert "FIRING" in [e["state"] for e in events], events
    print(f"\nFIGURES lost worker: executor {lost_id} (and {len(python)} Python processes) killed under "
          f"{2 * RATE:,} messages/s; removed after {t_removed:.1f} s ({gone['removeReason']}), next commit after "
          f"{t_commit:.1f} s; {len(batches)} batches with failed tasks ({', '.join(map(str, batches))}); "
          f"worker started again: its new executor registered after {up[0]:.1f} s and completed a task after "
          f"{t_fresh:.1f} s; {ex.logged:,} events exact, "
          f"{ex.logged / t_drained:,.0f} events/s over the run\n  job page: {line}")
