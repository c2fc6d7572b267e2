"""A class-data-sharing archive of the driver JVM: Spark's classes mapped, not loaded from jars.

A Spark driver loads ~20,000 classes from its jars while the session, the query and the
first batch start; on a cold JVM that is most of a short run's wall time. Java's dynamic
AppCDS archive keeps those classes parsed and verified in one file that later JVMs map
(`-XX:SharedArchiveFile`): `marketspread replay` of 2M events took 6.5 s without it and
5.2 s with it, its SparkSession start-up 2.5 s against 1.6 s (docs/PERFORMANCE.md, "Design
decisions": "A class-data-sharing archive of the driver's classes, linked before the dump").

The archive is an install artefact, like compiled bytecode: `scripts/setup` makes it once
(`marketspread jvm-archive`, ~20 s) in the venv, one file (~155 MB) per PySpark version,
and removes those of other versions. A JVM that cannot use it (another JDK, another class
path, a damaged file) ignores it and starts as it would without (`-Xshare:auto`).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from collector.safe_delete import remove_in

from engine.spark import jvm_jar
from engine.spark.jdk import ARCHIVE_DIR, java_tool
_PREFIX = "spark-driver-"
# Quiet: a mismatched archive is not the user's problem, and its fallback is the normal start.
_QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"
LINKER = "marketspread.jvm.ClassLinker"   # in the project's jar (java/marketspread/jvm/)


def record_options(class_log: Path) -> str:
    """Options of a JVM whose classes `dump` will write: recordable, and logging the classes
    it loads to `class_log` (a path without spaces: Spark splits Java options on them)."""
    if " " in str(class_log):
        raise ValueError(f"a class log path with a space cannot be a JVM option: {class_log}")
    return f"-XX:+RecordDynamicDumpInfo -Xlog:class+load=info:file={class_log}"


def archive_path(folder: Path = ARCHIVE_DIR) -> Path:
    """The archive of this PySpark version and class path (the JVM itself checks the JDK and the jars)."""
    import pyspark  # lazy: its version only when an archive is looked for
    # The class path is part of what the archive holds: a driver with the project's jar
    # on it (jvm_jar.py) needs an archive recorded with that jar.
    jar = jvm_jar.installed_jar(folder)
    return folder / f"{_PREFIX}{pyspark.__version__}{'-' + jar.stem if jar else ''}.jsa"


def java_options(folder: Path = ARCHIVE_DIR) -> str:
    """Driver JVM options that use the archive when there is one, else ''."""
    path = archive_path(folder)
    return f"-XX:SharedArchiveFile={path} {_QUIET}" if path.is_file() else ""


def dump(spark, folder: Path = ARCHIVE_DIR, class_log: Path | None = None) -> Path:
    """Write the archive of the classes `spark`'s driver JVM has loaded; return its path.

    The JVM must have been started with `record_options(class_log)` (and without an
    archive of its own). The classes in `class_log` are linked first, when the JVM has the
    project's jar: JDK 17 leaves unlinked classes out of the archive, ~3,800 of a replay's
    (the verifier's exception types and interfaces), and with them in, a 2M replay took
    4.65-4.79 s against 5.42-5.70 s (docs/PERFORMANCE.md, "Design decisions", the same). Written
    beside its final name and renamed, so a JVM never maps half a file; archives of other
    PySpark versions or class paths (an older project jar, jvm_jar.py) are removed.
    """
    if class_log is not None and jvm_jar.has_class(spark, LINKER):
        spark.sparkContext._jvm.marketspread.jvm.ClassLinker.linkLoaded(str(class_log))
    jcmd = java_tool("jcmd")
    path = archive_path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    remove_in(folder, tmp)
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    r = subprocess.run([jcmd, str(pid), "VM.cds", "dynamic_dump", str(tmp)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not tmp.is_file():
        remove_in(folder, tmp)
        raise RuntimeError(f"jcmd could not dump the JVM's classes: {(r.stdout + r.stderr).strip()[-500:]}")
    tmp.replace(path)
    for old in folder.glob(f"{_PREFIX}*.jsa*"):
        if old != path:
            remove_in(folder, old)
    return path
