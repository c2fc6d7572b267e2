"""What makes a Spark start cheap: the driver's class archive, PySpark's bytecode, a warm worker.

Real JVMs, a real Spark session and real Python processes; no timing is asserted here
(bench/replay_ab.py measures), only that each mechanism is in effect and harmless when
it cannot be.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyspark
import pytest

from engine.spark import jvm_archive, jvm_jar
from engine.spark.source import JVM_SOURCE
from engine.spark.warmup import warm_workers

ZIPS = sorted(str(p) for p in (Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))


def _pyspark_file(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MS_SPARK_PYTHON_FROM_ZIP"}
    env.update(PYTHONPATH=os.pathsep.join(ZIPS), **env_extra)
    r = subprocess.run([sys.executable, "-c", "import pyspark; print(pyspark.__file__)"],
                       env=env, capture_output=True, text=True, timeout=60, check=True)
    return r.stdout.strip()


def _cmdline(p: psutil.Process) -> list[str]:
    """A process's command line; [] for one that ended meanwhile (a JVM child not yet reaped)."""
    try:
        return p.cmdline()
    except psutil.Error:
        return []


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def test_spark_started_python_imports_the_installed_pyspark():
    """Spark puts pyspark.zip first on its Python processes' path; the venv's .pth (setup) undoes that."""
    assert ZIPS, "PySpark's zipped libraries not found"
    assert ".zip" not in _pyspark_file({}), "scripts/setup installs pyspark-installed-first.pth"
    assert ".zip" in _pyspark_file({"MS_SPARK_PYTHON_FROM_ZIP": "1"})     # the switch the A/B bench uses


def test_no_archive_gives_no_options(tmp_path):
    assert jvm_archive.java_options(tmp_path) == ""


def test_a_damaged_archive_is_ignored_by_the_jvm(tmp_path):
    """A JVM that cannot map the archive starts as it would without it, silently."""
    jvm_archive.archive_path(tmp_path).write_bytes(os.urandom(1 << 16))
    opts = jvm_archive.java_options(tmp_path)
    assert "-XX:SharedArchiveFile=" in opts and "-Xshare:auto" in opts
    r = subprocess.run(["java", *opts.split(), "-version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "sharing" not in r.stderr and "warning" not in r.stderr.lower(), r.stderr


def test_without_the_ui_the_status_store_keeps_little(spark):
    from engine.spark.session import QUIET_STATUS_STORE
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.enabled") == "false"
    assert {k: spark.conf.get(k) for k in QUIET_STATUS_STORE} == QUIET_STATUS_STORE
    assert {k: conf.get(k) for k in QUIET_STATUS_STORE} == QUIET_STATUS_STORE
    # the status store drops old jobs past a hundred (Spark's default keeps a thousand)
    store = spark.sparkContext._jsc.sc().statusStore()
    for _ in range(150):
        spark.sparkContext.parallelize([1], 1).count()
    deadline = time.monotonic() + 20              # Spark drops them in a thread of its own
    while store.jobsList(None).size() > 100 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert 0 < store.jobsList(None).size() <= 100


def test_the_session_maps_the_archive_setup_made(spark):
    """scripts/setup records the archive (`marketspread jvm-archive`); the driver JVM maps it."""
    if not jvm_archive.archive_path().is_file():
        msg = f"no JVM class archive at {jvm_archive.archive_path()} (scripts/setup makes it)"
        if os.environ.get("CI"):
            pytest.fail(msg)               # in CI a missing archive is a set-up bug
        pytest.skip(msg)
    jvm = spark.sparkContext._jvm
    assert "sharing" in jvm.java.lang.System.getProperty("java.vm.info")
    args = " ".join(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={jvm_archive.archive_path()}" in args


def test_the_archive_holds_what_a_replays_driver_loads(tmp_path):
    """A fresh driver, its session and warm-up job, reads (almost) no class from a jar: the
    archive keeps the classes the verifier only loaded too (linked before the dump).
    Measured: 405 of ~13,000 from jars; without that linking, 3,554."""
    if not jvm_archive.archive_path().is_file():
        msg = f"no JVM class archive at {jvm_archive.archive_path()} (scripts/setup makes it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    log = tmp_path / "classes.log"
    code = f"""
from engine.spark.session import build_session
from engine.spark.warmup import warm_workers
from marketspread.replay import QUICK_START
opts = QUICK_START["spark.driver.extraJavaOptions"] + " -Xlog:class+load=info:file={log}"
spark = build_session("local[1]", shards=1, extra={{"spark.driver.extraJavaOptions": opts}})
warm_workers(spark, 1000, 1).worker.join(120)
spark.stop()
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = log.read_text().splitlines()
    shared = sum("source: shared objects file" in line for line in lines)
    from_jars = [line.split()[1] for line in lines if " source: file:" in line or " source: jar:" in line]
    assert shared > 10_000
    assert len(from_jars) < 1000, from_jars[:20]


def test_warm_up_leaves_a_python_worker_with_the_job_imported_and_a_planner_only_for_pythons_source(spark):
    """After the warm-ups, the JVM has a worker that imported the job's modules, and a read
    planner if (and only if) the ingress source is Python's (no project jar)."""
    threads = warm_workers(spark, 10_000)
    for t in threads.started():
        t.join(120)
    assert not any(t.is_alive() for t in threads.started())
    jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    children = psutil.Process(jvm_pid).children()
    daemons = [p for p in children
               if "pyspark.daemon" in " ".join(_cmdline(p)) and _cmdline(p)[-1:] == ["pyspark.worker"]]
    assert daemons, "no pyspark.worker daemon started"
    workers = [w for d in daemons for w in d.children()]
    assert workers, "the daemon keeps no idle worker (spark.python.worker.reuse)"
    maps = "".join(_maps(w.pid) for w in workers)
    assert "pyarrow" in maps                 # the worker loaded Arrow: the first batch will not
    planners = [p for p in children if _cmdline(p)[-1:] == ["pyspark.sql.worker.plan_data_source_read"]]
    if jvm_jar.has_class(spark, JVM_SOURCE):
        # (The session is the whole run's: other tests may have started a planner in it;
        # a query's own processes are checked in a fresh JVM below.)
        assert threads.planner is None
    else:
        assert planners, "the read-planning daemon was not started"


def test_the_jobs_query_starts_no_python_for_its_source(tmp_path):
    """With the project's jar, a query's start runs no Python data source process: none to
    find the source, create it, plan or run it (three fresh interpreters with Python's)."""
    code = """
import sys, time, psutil
from dataclasses import replace
from engine.config import Config
from engine.spark.session import build_session
from engine.spark.job import start_query, stop_query
from engine.spark.source import JVM_SOURCE
from engine.spark.jvm_jar import has_class
from marketspread.progress import ConsumedOffsetListener
spark = build_session("local[1]", shards=1)
assert has_class(spark, JVM_SOURCE)
if sys.argv[2] == "python":                 # the control: the fallback source in the same session
    import engine.spark.job as job
    from engine.spark.source import IngressDataSource, SOURCE_NAME
    job.source_format = lambda s: (s.dataSource.register(IngressDataSource), SOURCE_NAME)[1]
cfg = replace(Config(), state_dir=__import__("pathlib").Path(sys.argv[1]))
cfg.log_dir.mkdir(parents=True)
q = start_query(spark, cfg, consumed=ConsumedOffsetListener(str(cfg.log_dir), None))
q.processAllAvailable()
jvm = psutil.Process(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
def cmdline(p):
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""
seen = [cmdline(p) for p in jvm.children(recursive=True)]
stop_query(spark, q)
print("SEEN", sorted({c.split()[-1] for c in seen if "data_source" in c or "streaming_source" in c}), flush=True)
"""
    if jvm_jar.installed_jar() is None:
        msg = f"no project jar at {jvm_jar.jar_path()} (scripts/setup builds it)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    seen = {}
    for source in ("jvm", "python"):
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path / source), source], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        [line] = [ln for ln in r.stdout.splitlines() if ln.startswith("SEEN ")]   # the JVM logs on stdout too
        seen[source] = line[len("SEEN "):]
    assert seen["jvm"] == "[]"
    assert "lookup_data_sources" in seen["python"] and "python_streaming_source_runner" in seen["python"], seen


def test_the_job_session_compiles_no_code(spark):
    """The job's few JVM rows run interpreted: no whole-stage code, no expression code to compile."""
    df = spark.range(0, 10, 1, 1).selectExpr("CAST(id * 2 AS INT) AS shard").where("shard > 4")
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "WholeStageCodegen" not in plan and "*(" not in plan, plan
    assert [r.shard for r in df.collect()] == [6, 8, 10, 12, 14, 16, 18]
    jvm = spark.sparkContext._jvm
    before = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()
    spark.range(0, 5, 1, 1).selectExpr("id + 41 AS x", "CAST(id AS STRING) AS s").where("x % 2 = 1").collect()
    assert jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount() == before


def test_the_driver_jvm_compiles_with_c1_only(spark):
    """C2 kept compiling for minutes into a live run, on the batches' cores (session.py)."""
    from engine.spark.session import C1_ONLY
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert C1_ONLY in args
