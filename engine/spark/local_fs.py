"""The driver's checkpoint logs on a local file system that forks no `chmod` per file.

Without Hadoop's native library (pip's PySpark ships none), Hadoop's local file system
sets each new file's permissions by running `chmod` in a child process of the JVM. The
streaming query writes an offset and a commit log entry per micro-batch, so two forks
sat on every batch's critical path: 9.4 against 3.7 ms per checkpoint file
(`createAtomic` through py4j, 50 files, bench/README.md "Issue 17, session 12").
`NioLocalFileSystem` (java/marketspread/hadoop/) is Hadoop's `RawLocalFileSystem` with
`setPermission` done through java.nio.

Like the JVM class archive (jvm_archive.py), the jar is an install artefact:
`marketspread jvm-archive` compiles it once with the JDK's `javac` into the venv,
named by a hash of its source. The session puts it on the driver's class path and
names it `fs.file.impl` in the session's SQL conf only: Spark copies that conf into the
Hadoop conf its checkpoint logs use on the driver, and sends executors only `spark.*`
keys, so executors (a cluster's too) never need the jar. Without the jar everything
runs as before.
"""
from __future__ import annotations

import hashlib
import subprocess
import tempfile
import zipfile
from pathlib import Path

from engine.spark.jdk import ARCHIVE_DIR, java_tool

CLASS = "marketspread.hadoop.NioLocalFileSystem"
SOURCE = Path(__file__).resolve().parent / "java" / (CLASS.replace(".", "/") + ".java")
_PREFIX = "nio-local-fs-"


def jar_path(folder: Path = ARCHIVE_DIR) -> Path:
    """Where the jar of the current source goes (its name changes with the source)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    return folder / f"{_PREFIX}{digest}.jar"


def installed_jar(folder: Path = ARCHIVE_DIR) -> Path | None:
    """The jar of the current source, if it was built."""
    path = jar_path(folder)
    return path if path.is_file() else None


def _hadoop_api() -> Path:
    import pyspark  # lazy: only to find Hadoop's jar beside it
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        raise RuntimeError("PySpark's hadoop-client-api jar not found")
    return jars[-1]


def build(folder: Path = ARCHIVE_DIR) -> Path:
    """Compile the class against PySpark's Hadoop into the jar; return its path.

    Written beside its final name and renamed; jars of older sources are removed.
    """
    javac = java_tool("javac")
    path = jar_path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ms-nio-fs-") as tmp:
        r = subprocess.run([javac, "--release", "17", "-nowarn", "-d", tmp, "-cp", str(_hadoop_api()), str(SOURCE)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"javac could not compile {SOURCE.name}: {(r.stdout + r.stderr).strip()[-500:]}")
        part = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:   # a jar is a zip
            for f in sorted(Path(tmp).rglob("*.class")):
                z.write(f, f.relative_to(tmp).as_posix())
        part.replace(path)
    for old in folder.glob(f"{_PREFIX}*.jar*"):
        if old != path:
            old.unlink(missing_ok=True)
    return path


def session_conf(folder: Path = ARCHIVE_DIR) -> dict[str, str]:
    """Spark conf that puts the jar on the driver's class path, or {} without a jar."""
    jar = installed_jar(folder)
    return {"spark.driver.extraClassPath": str(jar)} if jar else {}


def use(spark) -> bool:
    """Make `spark`'s checkpoint logs use the class when its JVM has it; return whether.

    Asked of the JVM, not of the folder: a session started before the jar was built
    (`getOrCreate` hands back a running one) must keep Hadoop's class.
    """
    try:
        spark._jvm.java.lang.Class.forName(CLASS)
    except Exception:                    # py4j's error for ClassNotFoundException
        return False
    spark.conf.set("fs.file.impl", CLASS)
    return True
