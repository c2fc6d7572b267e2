"""The soak's run and verdict (`python -m bench.soak` runs it): a steady load for 10 minutes; memory, files, threads and state must stay flat.

perf/e2e.py's whole path (`marketspread ingress`, `marketspread job` with metrics on to a real
InfluxDB on a free loopback port, two looping senders at `--rate` events/s in all) runs
for `--duration` s. Every `--every` s it records, per process group (the ingress, the
job's driver, its JVM, its Python workers together, each sender): resident memory, open
file descriptors and threads from /proc; and the job's state (rows and memory from
Spark's progress, as the listener writes them to InfluxDB's `spark_progress`; files and
bytes of the checkpoint's state folder).

Every `--gc-every` s it also forces a full GC in the job's JVM (`jcmd GC.run`) and reads
its heap in use right after (`jstat -gc`): the JVM's live set. A JVM's RSS grows until its
heap has expanded to `-Xmx` (Spark's `spark.driver.memory`, 1 GiB by default) whether it
leaks or not, so the JVM's memory is judged by its live set; its RSS is reported beside it.

Verdict (after the warm-up; the window is cut in thirds and the last compared with the
first): memory flat (median RSS of the last third within 15 % + 64 MiB of the first;
for the JVM, the median live heap), open files and threads not growing (medians of the
last third within a small slack of the first's; the JVM's per-task Python monitors, whose
number follows the task rate, are reported apart), state rows bounded (never above the
symbol count: the shards' snapshots hold one entry per symbol) and state memory flat. Writes
bench/out/soak.json (bench/results/soak.json with `--record`) and prints the verdict;
exit 1 only if the run broke, never on a figure.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collector.catalogue import FIELD_STATE_MEMORY_BYTES, FIELD_STATE_ROWS
from collector.influx import InfluxClient
from collector.influx.server import InfluxServer
from collector.safe_delete import try_remove_tree
from collector.vocabulary import SPARK_PROGRESS, TAG_RUN
from engine.config import Config
from engine.formats.log import read_consumed, read_head
from perf import e2e
from perf.fleet import Fleet, Proc, check_alive, session_members, signals_ignored, wait_until

DB = "soak"


@dataclass(frozen=True)
class Tolerance:
    """How much a figure may move between the first and the last third of the window."""
    rss_ratio: float = 0.15
    rss_slack_bytes: int = 64 << 20
    fd_slack: int = 4
    thread_slack: int = 8


@dataclass(frozen=True)
class GroupSample:
    """One process group at one moment."""
    processes: int
    rss_bytes: int
    fds: int
    threads: int
    task_threads: int = 0      # of `threads`, Spark's per-task monitors (see `_task_threads`)


@dataclass(frozen=True)
class SoakSample:
    """Everything recorded at one moment."""
    t: float
    consumed: int
    head: int
    groups: dict[str, GroupSample]
    state_rows: int | None
    state_memory_bytes: int | None
    state_files: int
    state_bytes: int
    jvm_live_heap_bytes: int | None = None     # heap in use right after a forced full GC


def _proc_figures(pid: int) -> tuple[int, int, int] | None:
    """(rss bytes, open fds, threads) of one process, None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    vals = {ln.split(":")[0]: ln.split()[1] for ln in status if ln.startswith(("VmRSS:", "Threads:"))}
    return int(vals.get("VmRSS", 0)) * 1024, fds, int(vals.get("Threads", 0))


def _task_threads(pid: int) -> int:
    """Threads of Spark's per-task Python runner monitors ("Worker Monitor for <python>").

    Each Python task's monitor sleeps 2 s between checks of its task's end, so a JVM
    running 50 short tasks a second holds ~100 of them: their number follows the task
    rate, not the run's age, and is judged apart from the JVM's other threads.
    """
    n = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            n += Path(f"/proc/{pid}/task/{tid}/comm").read_text().startswith("Worker Monitor")
        except OSError:
            pass                 # the thread ended between the listing and the read
    return n


def _role(pid: int, leader: int) -> str:
    if pid == leader:
        return "driver"
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return "other"
    return "jvm" if exe.endswith("/java") else "python-workers"


def group_samples(procs: list[Proc]) -> dict[str, GroupSample]:
    """Per process group: the ingress and senders as they are, the job split into driver, JVM, workers."""
    acc: dict[str, list[tuple[int, int, int, int]]] = {}
    for p in procs:
        for pid in session_members(p.popen.pid):
            name = p.name if p.name != "job" else f"job-{_role(pid, p.popen.pid)}"
            if p.name != "job" and pid != p.popen.pid:
                continue
            fig = _proc_figures(pid)
            if fig is not None:
                acc.setdefault(name, []).append((*fig, _task_threads(pid) if name == "job-jvm" else 0))
    return {name: GroupSample(len(v), *(sum(f[i] for f in v) for i in range(4))) for name, v in acc.items()}


def jvm_pid(procs: list[Proc]) -> int | None:
    """The job's JVM (the session member running java)."""
    for p in procs:
        if p.name == "job":
            return next((pid for pid in session_members(p.popen.pid) if _role(pid, p.popen.pid) == "jvm"),
                        None)
    return None


def parse_jstat_gc(text: str) -> int:
    """Old generation in use (bytes) from `jstat -gc` output.

    Right after a full GC every live object is in the old generation; eden refills at
    once (by ~100 MB in the moment jstat takes to start), so it is left out.
    """
    head, values = text.split("\n")[:2]
    row = dict(zip(head.split(), values.split()))
    return int(float(row["OU"]) * 1024)


def jvm_live_heap(pid: int) -> int | None:
    """Force a full GC in the JVM and return its heap in use right after; None without a JDK."""
    jcmd, jstat = shutil.which("jcmd"), shutil.which("jstat")
    if not (jcmd and jstat):
        return None
    try:
        subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, timeout=30, check=True)
        out = subprocess.run([jstat, "-gc", str(pid)], capture_output=True, text=True, timeout=30, check=True)
        return parse_jstat_gc(out.stdout)
    except (subprocess.SubprocessError, OSError, ValueError, KeyError):
        return None


def state_on_disk(checkpoint: Path) -> tuple[int, int]:
    """Files and bytes under the checkpoint's shard state folder (engine/spark/shard_state.py)."""
    sizes = []
    folder = checkpoint / "shard-state"
    for p in folder.rglob("*") if folder.is_dir() else ():
        try:
            if p.is_file():
                sizes.append(p.stat().st_size)
        except FileNotFoundError:
            pass                 # a temp file Spark renamed between the listing and the stat
    return len(sizes), sum(sizes)


def spark_state(client: InfluxClient | None, run: str | None) -> tuple[int | None, int | None]:
    """The last state rows and memory Spark reported (the listener's `spark_progress` points)."""
    if client is None or run is None:
        return None, None
    try:
        res = client.query(f'SELECT last("{FIELD_STATE_ROWS}"), last("{FIELD_STATE_MEMORY_BYTES}") '
                           f'FROM "{SPARK_PROGRESS}" WHERE "{TAG_RUN}" = $run', params={"run": run})
    except Exception:          # a figure missing now and then is not a failure of the run
        return None, None
    if not res or not res[0].values:
        return None, None
    _, rows, mem = res[0].values[0]
    return (int(rows) if rows is not None else None), (int(mem) if mem is not None else None)


def take(t: float, run_dir: Path, procs: list[Proc], client: InfluxClient | None,
         gc: bool = False) -> SoakSample:
    """Record one sample of the run (with `gc`, also the JVM's live heap after a full GC)."""
    log_dir = run_dir / "ingress"
    run_file = run_dir / "run_id"
    rows, mem = spark_state(client, run_file.read_text().strip() if run_file.exists() else None)
    files, size = state_on_disk(run_dir / "checkpoint")
    pid = jvm_pid(procs) if gc else None
    live = jvm_live_heap(pid) if pid else None
    return SoakSample(round(t, 2), read_consumed(log_dir), read_head(log_dir), group_samples(procs),
                      rows, mem, files, size, live)


# --------------------------------------------------------------------------- verdict (pure)

def _thirds(values: list[float]) -> tuple[list[float], list[float]]:
    k = max(1, len(values) // 3)
    return values[:k], values[-k:]


def verdict(samples: list[SoakSample], warmup: float, symbols: int, tol: Tolerance = Tolerance()) -> dict:
    """Judge the samples after the warm-up: per group and for the state, flat or growing, and why."""
    win = [s for s in samples if s.t >= warmup]
    checks: dict[str, dict] = {}
    if len(win) < 6:
        return {"ok": False, "checks": {}, "reason": f"only {len(win)} samples after the warm-up"}
    names = sorted({n for s in win for n in s.groups})
    for name in names:
        series = [s.groups[name] for s in win if name in s.groups]
        if len(series) < 6:
            continue
        first, last = _thirds([g.rss_bytes for g in series])
        rss_limit = np.median(first) * (1 + tol.rss_ratio) + tol.rss_slack_bytes
        f_fd, l_fd = _thirds([g.fds for g in series])
        f_th, l_th = _thirds([g.threads - g.task_threads for g in series])
        t = np.array([s.t for s in win if name in s.groups]) / 60
        slope = float(np.polyfit(t, [g.rss_bytes / 2**20 for g in series], 1)[0]) if len(t) > 1 else 0.0
        # fds and threads by their medians: a Python worker that lives for a moment
        # carries its daemon's inherited descriptors (one sample of 325 where 26 is usual)
        checks[name] = {
            "rss_first_mib": round(float(np.median(first)) / 2**20, 1),
            "rss_last_mib": round(float(np.median(last)) / 2**20, 1),
            "rss_slope_mib_per_min": round(slope, 2),
            "rss_flat": bool(np.median(last) <= rss_limit),
            "fds_first": int(np.median(f_fd)), "fds_last": int(np.median(l_fd)),
            "fds_first_max": int(max(f_fd)), "fds_last_max": int(max(l_fd)),
            "fds_flat": bool(np.median(l_fd) <= np.median(f_fd) + tol.fd_slack),
            "threads_first": int(np.median(f_th)), "threads_last": int(np.median(l_th)),
            "threads_flat": bool(np.median(l_th) <= np.median(f_th) + tol.thread_slack),
            "task_threads_max": max(g.task_threads for g in series),
        }
        live = [s.jvm_live_heap_bytes for s in win if s.jvm_live_heap_bytes is not None] if name == "job-jvm" else []
        if len(live) >= 3:
            fl, ll = _thirds(live)
            checks[name].update(
                live_heap_first_mib=round(float(np.median(fl)) / 2**20, 1),
                live_heap_last_mib=round(float(np.median(ll)) / 2**20, 1),
                rss_flat=bool(np.median(ll) <= np.median(fl) * (1 + tol.rss_ratio) + tol.rss_slack_bytes),
                judged_by="live heap after a full GC")
        checks[name]["ok"] = checks[name]["rss_flat"] and checks[name]["fds_flat"] and checks[name]["threads_flat"]
    rows = [s.state_rows for s in win if s.state_rows is not None]
    mem = [s.state_memory_bytes for s in win if s.state_memory_bytes is not None]
    st = {"rows_max": max(rows) if rows else None, "rows_bounded": bool(rows) and max(rows) <= symbols}
    if len(mem) >= 6:
        fm, lm = _thirds(mem)
        st.update(memory_first=int(np.median(fm)), memory_last=int(np.median(lm)),
                  memory_flat=bool(np.median(lm) <= np.median(fm) * (1 + tol.rss_ratio) + (1 << 20)))
    else:
        st["memory_flat"] = False
    files = [s.state_files for s in win]
    ff, lf = _thirds(files)
    st.update(files_first_max=max(ff), files_last_max=max(lf))
    st["ok"] = st["rows_bounded"] and st["memory_flat"]
    checks["state"] = st
    return {"ok": all(c["ok"] for c in checks.values()), "checks": checks}


def format_verdict(v: dict) -> str:
    """One line per group and one for the state."""
    lines = [f"soak verdict: {'FLAT' if v['ok'] else 'GROWING (see below)'}"]
    for name, c in v.get("checks", {}).items():
        if name == "state":
            lines.append(f"  state: rows max {c['rows_max']} (bounded: {c['rows_bounded']}), memory "
                         f"{c.get('memory_first')} -> {c.get('memory_last')} B (flat: {c['memory_flat']}), "
                         f"checkpoint state files max {c['files_first_max']} -> {c['files_last_max']}")
            continue
        live = (f"  live heap {c['live_heap_first_mib']:.1f} -> {c['live_heap_last_mib']:.1f} MiB"
                if "live_heap_first_mib" in c else "")
        tasks = f" (+ per-task monitors, max {c['task_threads_max']})" if c.get("task_threads_max") else ""
        lines.append(f"  {name:18s} RSS {c['rss_first_mib']:7.1f} -> {c['rss_last_mib']:7.1f} MiB "
                     f"({c['rss_slope_mib_per_min']:+.2f} MiB/min){live}  fds {c['fds_first']} -> "
                     f"{c['fds_last']} (max {c['fds_last_max']})  threads {c['threads_first']} -> {c['threads_last']}"
                     f"{tasks}  {'ok' if c['ok'] else 'GROWING'}")
    return "\n".join(lines + ([v["reason"]] if "reason" in v else []))


# --------------------------------------------------------------------------- the run

def run_soak(state_dir: Path, duration: float, rate: int, every: float, shards: int = Config().shards,
             master: str = "local[*]", symbols: int = 350, env: dict[str, str] | None = None,
             progress: bool = True, gc_every: float | None = None) -> list[SoakSample]:
    """Run the whole path at `rate` for `duration` s, sampling every `every` s; return the samples.

    Every `gc_every` s (None: never) a sample also reads the JVM's live heap.

    The samples start at the job's first commit. InfluxDB is started here (free port).
    """
    influx = InfluxServer(state_dir / "influx", port=0, db=DB)
    influx.start()
    client = influx.client()
    nbbo, orders = e2e.ensure_input(state_dir / "data", symbols, wide_share=0.1)
    run_dir = state_dir / "run"
    try_remove_tree(run_dir)
    (run_dir / "logs").mkdir(parents=True)
    fleet = Fleet(run_dir / "logs", cwd=run_dir,
                      env={**client.config.as_env(), "MS_METRICS": "true", **(env or {})})
    cfg = e2e.BenchConfig(mode="latency", duration=duration, warmup=0, rate=rate, symbols=symbols,
                          wide_share=0.1, master=master, shards=shards, max_rows_per_batch=None,
                          max_backlog=1_000_000, state_dir=str(state_dir))
    samples: list[SoakSample] = []
    try:
        ingress, ports = e2e.start_ingress(fleet, run_dir, cfg)
        job = e2e.start_job(fleet, run_dir, cfg)
        e2e.start_senders(fleet, ports, {"nbbo": nbbo, "orders": orders}, rate)
        wait_until(lambda: read_consumed(run_dir / "ingress") > 0, e2e.JOB_READY_TIMEOUT,
                       "the first commit", fleet.procs)
        t0 = time.monotonic()
        for k in range(int(duration / every) + 1):
            time.sleep(max(0.0, t0 + k * every - time.monotonic()))
            check_alive(fleet.procs)
            gc = bool(gc_every) and k % max(1, round(gc_every / every)) == 0
            s = take(time.monotonic() - t0, run_dir, fleet.procs, client, gc)
            samples.append(s)
            if progress and k % max(1, int(30 / every)) == 0:
                mem = ", ".join(f"{n} {g.rss_bytes / 2**20:.0f} MiB" for n, g in sorted(s.groups.items()))
                live = f"; JVM live heap {s.jvm_live_heap_bytes / 2**20:.0f} MiB" if s.jvm_live_heap_bytes else ""
                print(f"[{s.t:5.0f} s] consumed {s.consumed:,} backlog {s.head - s.consumed:,}; {mem}; "
                      f"state rows {s.state_rows}{live}", flush=True)
        fleet.stop(job, timeout=e2e.JOB_STOP_TIMEOUT, leader_only=True)
    finally:
        with signals_ignored():
            fleet.stop_all()
        client.close()
        influx.stop()
    return samples
