"""Facts about the machine and the CPU and memory of running processes (psutil).

A process "tree" here is a session (perf/fleet.py starts each command as a session
leader), so the job's figures include Spark's JVM and its Python workers, not just the
driver's Python process. psutil, not /proc read by hand: a session sample (what the
benchmarks take every second) takes 1.3 ms against 8.7 ms (a session of 11 of 140
processes), since only the session's own processes are read. The CPU model is still
/proc/cpuinfo's: psutil does not give it. `allocated_bytes` is what a run's folder takes
on disk.
"""
from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil

PROC = Path("/proc")


@dataclass(frozen=True)
class MachineInfo:
    """The machine a run ran on."""
    hostname: str
    cores: int                       # logical CPUs online
    usable_cores: int                # in this process' affinity mask
    cpu_model: str
    mem_total_bytes: int
    kernel: str
    python: str


@dataclass(frozen=True)
class CpuMem:
    """Cumulative CPU seconds per process and the resident memory of a set of processes at one moment."""
    wall_ns: int
    cpu_s: dict[int, float]          # pid -> user + system seconds since it started
    rss_bytes: int

    @property
    def processes(self) -> int:
        return len(self.cpu_s)


@dataclass(frozen=True)
class ProcessSample:
    """CPU use (since the previous sample) and memory of one named process tree."""
    name: str
    time_ns: int
    cpu_percent: float               # 100 = one core busy
    rss_bytes: int
    processes: int


def machine_info() -> MachineInfo:
    """Describe this machine (psutil; the CPU model from /proc/cpuinfo)."""
    model = platform.processor() or "unknown"
    try:
        for line in (PROC / "cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return MachineInfo(hostname=platform.node(), cores=os.cpu_count() or 1,
                       usable_cores=len(os.sched_getaffinity(0)), cpu_model=model,
                       mem_total_bytes=psutil.virtual_memory().total, kernel=platform.release(),
                       python=platform.python_version())


def machine_summary() -> dict:
    """Describe this machine for a benchmark's result file: `machine_info`, the load average and PySpark."""
    m = machine_info()
    return {"nproc": m.cores, "usable_cpus": m.usable_cores, "cpu_model": m.cpu_model,
            "mem_total_gib": round(m.mem_total_bytes / 2**30, 1), "loadavg_at_start": list(os.getloadavg()),
            "python": m.python, "pyspark": package_version("pyspark"), "kernel": m.kernel}


def package_version(pkg: str) -> str | None:
    """Return an installed package's version, None if it is not installed."""
    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


def git_info(root: Path) -> dict:
    """Return the code a run measured: HEAD's commit, whether tracked files differ and which (commit None outside git)."""
    def git(*args):
        try:
            r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout.rstrip("\n") if r.returncode == 0 else None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status), "changed": status.splitlines() if status else []}


def session_usage(sid: int, wall_ns: int) -> CpuMem:
    """Sum CPU seconds and RSS over the live processes of session `sid`."""
    cpu: dict[int, float] = {}
    rss = 0
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) != sid:
                continue
            with proc.oneshot():
                times, rss_bytes = proc.cpu_times(), proc.memory_info().rss
        except (psutil.Error, OSError):             # gone meanwhile
            continue
        cpu[proc.pid] = times.user + times.system
        rss += rss_bytes
    return CpuMem(wall_ns, cpu, rss)


def cpu_percent(prev: CpuMem, cur: CpuMem) -> float:
    """Return the CPU use between two readings, in % of one core.

    Summed per process: one still there adds what it used since the previous reading, one
    that started meanwhile all it used; one that ended meanwhile is not seen (its last
    moments are missed, but it never turns the sum negative).
    """
    dt = (cur.wall_ns - prev.wall_ns) / 1e9
    if dt <= 0:
        return 0.0
    used = sum(max(0.0, cpu - prev.cpu_s.get(pid, 0.0)) for pid, cpu in cur.cpu_s.items())
    return 100.0 * used / dt


class SessionSampler:
    """Sample the CPU and memory of named sessions (e.g. `job`, `ingress`) over time.

        sampler = SessionSampler({"job": job_pid, "ingress": ingress_pid})
        sampler.sample(time.time_ns())       # every second
        sampler.samples                      # [ProcessSample, ...]
    """

    def __init__(self, sessions: dict[str, int]):
        self.sessions = dict(sessions)
        self.samples: list[ProcessSample] = []
        self._last: dict[str, CpuMem] = {}

    def sample(self, wall_ns: int) -> list[ProcessSample]:
        """Read every session once; return the new samples (none for a session's first reading)."""
        out = []
        for name, sid in self.sessions.items():
            cur = session_usage(sid, wall_ns)
            prev = self._last.get(name)
            self._last[name] = cur
            if prev is not None and cur.processes:
                out.append(ProcessSample(name, wall_ns, round(cpu_percent(prev, cur), 2), cur.rss_bytes,
                                         cur.processes))
        self.samples += out
        return out


def allocated_bytes(path: str | os.PathLike) -> int:
    """Bytes allocated on disk under `path` (files and folders, as `du` counts), tolerating
    files deleted while it walks (retention runs meanwhile)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total
