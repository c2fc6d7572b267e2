"""The project's JVM classes: one jar, compiled once at set-up, on the driver's class path.

Two classes, each measured to cut a cost Spark's own classes have here:

- `marketspread.hadoop.NioLocalFileSystem`, the checkpoint logs' file system without a
  forked `chmod` per file (local_fs.py);
- `marketspread.spark.IngressSource`, the ingress log's streaming source, planned in the
  JVM with no Python process (source.py).

Like the JVM class archive (jvm_archive.py), the jar is an install artefact:
`marketspread jvm-archive` compiles it with the JDK's `javac` against PySpark's jars into
the venv, named by a hash of the sources. Without it everything runs as before: Hadoop's
file system and the Python source.
"""
from __future__ import annotations

import hashlib
import subprocess
import tempfile
import zipfile
from pathlib import Path

from collector.safe_delete import remove_in

from engine.spark.jdk import ARCHIVE_DIR, java_tool

SOURCE_DIR = Path(__file__).resolve().parent / "java"
_PREFIX = "marketspread-jvm-"
_OLD_PREFIXES = ("nio-local-fs-",)     # an older jar: the file system class alone


def sources() -> list[Path]:
    """The Java sources, in a stable order."""
    return sorted(SOURCE_DIR.rglob("*.java"))


def jar_path(folder: Path = ARCHIVE_DIR) -> Path:
    """Where the jar of the current sources goes (its name changes with any of them, and
    with the PySpark whose jars it is compiled against)."""
    import pyspark  # lazy: its version only
    h = hashlib.sha256(pyspark.__version__.encode() + b"\0")
    for src in sources():
        h.update(src.relative_to(SOURCE_DIR).as_posix().encode() + b"\0" + src.read_bytes() + b"\0")
    return folder / f"{_PREFIX}{h.hexdigest()[:12]}.jar"


def installed_jar(folder: Path = ARCHIVE_DIR) -> Path | None:
    """The jar of the current sources, if it was built."""
    path = jar_path(folder)
    return path if path.is_file() else None


def _spark_jars() -> str:
    import pyspark  # lazy: only to find the jars beside it
    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("spark-sql_*.jar")):
        raise RuntimeError(f"PySpark's jars not found in {jars}")
    return str(jars / "*")


def build(folder: Path = ARCHIVE_DIR) -> Path:
    """Compile the sources against PySpark's jars into the jar; return its path.

    A jar of the same sources is kept as it is: a class archive recorded with it checks its
    modification time (jvm_archive.py). Written beside its final name and renamed; jars of
    older sources are removed.
    """
    path = jar_path(folder)
    if path.is_file():
        return path
    javac = java_tool("javac")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ms-jvm-jar-") as tmp:
        r = subprocess.run([javac, "--release", "17", "-nowarn", "-d", tmp, "-cp", _spark_jars(),
                            *map(str, sources())], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"javac could not compile {SOURCE_DIR}: {(r.stdout + r.stderr).strip()[-800:]}")
        part = path.with_name(path.name + ".tmp")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:   # a jar is a zip
            for f in sorted(Path(tmp).rglob("*.class")):
                z.write(f, f.relative_to(tmp).as_posix())
        part.replace(path)
    for prefix in (_PREFIX, *_OLD_PREFIXES):
        for old in folder.glob(f"{prefix}*.jar*"):
            if old != path:
                remove_in(folder, old)
    return path


def session_conf(master: str, folder: Path = ARCHIVE_DIR) -> dict[str, str]:
    """Spark conf that puts the jar on the driver's class path, or {} without a jar.

    A cluster's executors run the source's readers, so there Spark also ships the jar to
    them (`spark.jars`); a local master's executor is the driver's own JVM.
    """
    jar = installed_jar(folder)
    if jar is None:
        return {}
    conf = {"spark.driver.extraClassPath": str(jar)}
    if not master.startswith("local"):
        conf["spark.jars"] = str(jar)
    return conf


def has_class(spark, name: str) -> bool:
    """Whether `spark`'s driver JVM can load the class `name`.

    Asked of the JVM, not of the folder: a session started before the jar was built
    (`getOrCreate` hands back a running one) does not have it.
    """
    try:
        spark._jvm.java.lang.Class.forName(name)
    except Exception:                    # py4j's error for ClassNotFoundException
        return False
    return True
