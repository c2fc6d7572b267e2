"""A real Spark standalone cluster on loopback: a master and workers from PySpark's own launch classes.

    java -cp "$SPARK_HOME/jars/*" org.apache.spark.deploy.master.Master --host 127.0.0.1 ...
    java -cp "$SPARK_HOME/jars/*" org.apache.spark.deploy.worker.Worker spark://127.0.0.1:P ...

with SPARK_HOME the pyspark package folder. Used by tests/reliability/test_cluster.py and
bench/cluster_shards.py; the processes join the caller's `Fleet`, so its `stop_all`
stops them.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pyspark

from collector.influx.server import free_port
from collector.settings import PROJECT_ROOT
from perf.fleet import Fleet, Proc, wait_until

SPARK_HOME = Path(pyspark.__file__).resolve().parent
# marketspread/runner.py's line at the end of a job: what its state tasks read
_JOB_READ = re.compile(r"job read (\d+) bytes of ingress records \(log or shard files\) for (\d+) events")


@dataclass(frozen=True)
class Cluster:
    """A running cluster: its master URL, processes and the workers' work folders (executor logs)."""
    url: str
    master: Proc
    workers: list[Proc]
    work_dirs: list[Path]


def scala_version() -> str:
    """The Scala version of the bundled jars: a worker's executor launcher needs it without a build tree."""
    core = next((SPARK_HOME / "jars").glob("spark-core_*.jar"))
    return core.name.split("_")[1].split("-")[0]


def start_cluster(fleet: Fleet, java: str, cwd: Path, workers: int = 2, cores: int = 1,
                  memory: str = "1g") -> Cluster:
    """Start a master and `workers` workers of `cores` cores each on 127.0.0.1; return once all registered."""
    env = {**fleet.env, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_SCALA_VERSION": scala_version(), "PYTHONPATH": str(PROJECT_ROOT)}
    cp = f"{SPARK_HOME / 'jars'}/*"
    port, ui = free_port(), free_port()

    def launch(name: str, args: list[str]) -> Proc:
        log = fleet.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            p = subprocess.Popen([java, "-Xmx512m", "-cp", cp, *args], cwd=cwd, env=env,
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        fleet.procs.append(Proc(name, p, log))
        return fleet.procs[-1]

    master = launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(ui)])
    url = f"spark://127.0.0.1:{port}"
    wait_until(lambda: "I have been elected leader" in master.log_path.read_text(errors="replace"),
               60, "the master", [master])
    work_dirs = [cwd / f"work-{i}" for i in range(workers)]
    procs = [launch(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", url, "--cores", str(cores),
                                    "--memory", memory, "--host", "127.0.0.1", "--webui-port",
                                    str(free_port()), "--work-dir", str(work_dirs[i])])
             for i in range(workers)]
    wait_until(lambda: master.log_path.read_text(errors="replace").count("Registering worker") >= workers,
               90, f"{workers} workers to register", [master, *procs])
    return Cluster(url, master, procs, work_dirs)


def job_bytes_read(job_log: Path) -> tuple[int, int]:
    """(bytes the job's tasks read, events it committed), from a stopped `marketspread job`'s log."""
    found = _JOB_READ.findall(job_log.read_text(errors="replace"))
    if not found:
        raise ValueError(f"no 'job read ... bytes' line in {job_log}: did the job stop cleanly?")
    read, events = found[-1]
    return int(read), int(events)
