"""Build the Spark session the job runs in, with settings measured to cut per-batch cost."""
from __future__ import annotations

import atexit
import os
import re
import sys
import tempfile
from pathlib import Path

from collector.safe_delete import try_remove_tree
from collector.settings import spark_local_ip
from engine.config import Config
from engine.spark import jvm_archive, jvm_jar, local_fs


C1_ONLY = "-XX:TieredStopAtLevel=1"


def build_session(master: str = "local[*]", app_name: str = "market-spread", shards: int = Config.shards,
                  ui: bool = False, extra: dict[str, str] | None = None,
                  checkpoint_batches: int = Config.checkpoint_batches, archive: bool = True):
    """Return a SparkSession for the job; workers use this interpreter.

    The driver JVM maps the class archive `marketspread jvm-archive` made, when there is one
    (`archive`; jvm_archive.py), and has the project's jar that command compiled, when there
    is one (jvm_jar.py): its checkpoint logs use the jar's local file system class (local_fs.py).

    With a local master, Spark's scratch goes in a folder of this process in the system's
    temp folder, and those of processes that died without cleaning up (SIGKILL) are
    removed first.
    """
    # Not settings passing but PySpark's launcher contract: a driver started by plain
    # `python` (not spark-submit) takes its workers' interpreter only from PYSPARK_PYTHON
    # (SparkContext.pythonExec); `spark.pyspark.python` in the conf is read by spark-submit
    # alone, so it would leave local[*] and cluster workers on `python3`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # lazy: importers that build no session do not load pyspark

    conf = {
        "spark.sql.shuffle.partitions": str(shards),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        "spark.sql.adaptive.enabled": "false",
        # No generated code: the job's JVM rows are its planned ranges, one per shard and
        # batch, and compiling code for them (Janino) took ~0.15 s of the first batch
        # (first batch 0.44-0.53 -> 0.29-0.35 s; docs/PERFORMANCE.md, "Design decisions":
        # "No generated code"). `factoryMode` is
        # Spark's internal switch for expression code (projections, predicates).
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        # Checkpoint files through the raw local FS: no forked chmod/readlink per file
        # (walCommit+commitOffsets 40-55 ms -> 7-20 ms per batch).
        "spark.sql.streaming.checkpointFileManagerClass":
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.hadoop.fs.file.impl.disable.cache": "true",
        # ... and, on the driver, without a forked chmod per file either (local_fs.py);
        # the ingress source planned in the JVM (source.py). Both in the project's jar.
        **jvm_jar.session_conf(master),
        # The driver JVM plans, logs and commits a few rows per batch: C1 alone. C2 was
        # still compiling at 11-22 % of a core 60-200 s into a live run; at 50k events/s,
        # job CPU 121 -> 109 % of a core and p99 to committed 103 -> 76 ms over 220 s
        # (alternated 30-s runs: 126/119 -> 99/104 ms; docs/PERFORMANCE.md, "Design
        # decisions": "C1 only in the driver JVM").
        "spark.driver.extraJavaOptions": f"-Dlog4j2.level=WARN {C1_ONLY}",
        # JVM <-> Python workers over a Unix socket, not loopback TCP: over TCP each stateful
        # task stalled a steady ~40 ms (the mark of Nagle meeting delayed ACKs) between its
        # command and its Arrow input. p50 latency 262/238 -> 185/189 ms at 50k events/s.
        "spark.python.unix.domain.socket.enabled": "true",
        # What the checkpoint keeps: offset and commit log entries and state store versions
        # of this many batches (Spark's default, set here so the bound is explicit).
        "spark.sql.streaming.minBatchesToRetain": str(checkpoint_batches),
    }
    if not ui:
        conf.update(QUIET_STATUS_STORE)
    if master.startswith("local"):
        if not spark_local_ip():
            # Spark binds the driver to the host's first non-loopback address by default;
            # on one machine nothing outside needs to reach it. (A cluster's executors must:
            # there the driver's address is the user's choice, SPARK_LOCAL_IP or spark.driver.host.)
            conf["spark.driver.bindAddress"] = conf["spark.driver.host"] = "127.0.0.1"
        # The workers' Unix sockets take no secret: a folder only this user can enter keeps
        # other local users off them whatever the umask, and goes away with the process
        # (Spark leaves its socket files behind). A cluster's executors create theirs in
        # their own temp folder (`spark.python.unix.domain.socket.dir` to choose another).
        remove_dead_temp(Path(tempfile.gettempdir()), _SOCKET_PREFIX)
        conf["spark.python.unix.domain.socket.dir"] = _private_dir(Path(tempfile.gettempdir()), _SOCKET_PREFIX)
        # Shuffle and block files, PySpark's files, the native libraries the JVM unpacks:
        # a SIGKILL'd JVM leaves them, so each process has its own folder, named by pid and
        # start time, and the next start removes those of dead processes. In the temp
        # folder, not the state folder: scratch is not durable data and must not compete
        # for the disk that holds the log and the results.
        remove_dead_temp(Path(tempfile.gettempdir()), _SCRATCH_PREFIX)
        scratch = _private_dir(Path(tempfile.gettempdir()), _SCRATCH_PREFIX)
        conf["spark.local.dir"] = scratch
        conf["spark.driver.extraJavaOptions"] += f" -Djava.io.tmpdir={scratch}"
    extra = dict(extra or {})
    # The caller's JVM options add to these (the scratch folder above must stay).
    java_opts = [conf["spark.driver.extraJavaOptions"], extra.pop("spark.driver.extraJavaOptions", "")]
    if archive:
        java_opts.append(jvm_archive.java_options())
    conf.update(extra)
    conf["spark.driver.extraJavaOptions"] = " ".join(o for o in java_opts if o)
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    local_fs.use(spark)
    return spark


#: Without the Spark UI nobody reads Spark's status store, yet the driver records every
#: micro-batch's job, stage and SQL execution in it (with a formatted plan description) and
#: sorts them to drop the oldest: keep a hundred of each, and the plain plan text. At 50k
#: events/s, the driver JVM's CPU 25.6 -> 24.9 s per 30 s, all processes' 39.7 -> 39.0 s,
#: lower in 3 of 3 alternated pairs; latency unchanged (docs/PERFORMANCE.md, "Design
#: decisions": "Spark's status store trimmed without the UI").
#: With `--spark-ui` Spark's own defaults stay.
QUIET_STATUS_STORE = {
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.sql.ui.retainedExecutions": "100",
    "spark.sql.ui.explainMode": "simple",
}

_SOCKET_PREFIX = "ms-spark-"
_SCRATCH_PREFIX = "ms-spark-scratch-"


def _proc_start(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (with its pid: a unique identity)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _private_dir(parent: Path, prefix: str) -> str:
    """A fresh 0700 folder `<prefix><pid>-<start>-*` under `parent`, removed when this process exits."""
    parent.mkdir(parents=True, exist_ok=True)
    path = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-{_proc_start(os.getpid())}-", dir=parent)
    atexit.register(try_remove_tree, path)
    return path


def remove_dead_temp(parent: Path, prefix: str) -> list[Path]:
    """Remove this user's `<prefix><pid>-<start>-*` folders whose process is gone; return them."""
    removed = []
    try:
        entries = list(os.scandir(parent))
    except FileNotFoundError:
        return removed
    for e in entries:
        m = re.match(re.escape(prefix) + r"(\d+)-(\d+)-", e.name)
        if m is None or not e.is_dir(follow_symlinks=False) or e.stat(follow_symlinks=False).st_uid != os.getuid():
            continue
        if _proc_start(int(m.group(1))) == m.group(2):
            continue                                 # still running
        if try_remove_tree(e.path) is None:          # else the next start retries
            removed.append(Path(e.path))
    return removed
