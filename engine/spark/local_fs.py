"""The driver's checkpoint logs on a local file system that forks no `chmod` per file.

Without Hadoop's native library (pip's PySpark ships none), Hadoop's local file system
sets each new file's permissions by running `chmod` in a child process of the JVM. The
streaming query writes an offset and a commit log entry per micro-batch, so two forks
sat on every batch's critical path: 9.4 against 3.7 ms per checkpoint file
(`createAtomic` through py4j, 50 files; docs/PERFORMANCE.md, "Design decisions":
"Checkpoint logs without a forked `chmod`").
`NioLocalFileSystem` (java/marketspread/hadoop/) is Hadoop's `RawLocalFileSystem` with
`setPermission` done through java.nio.

The class is in the project's jar (jvm_jar.py), built once at set-up. The session names
it `fs.file.impl` in the session's SQL conf only: Spark copies that conf into the
Hadoop conf its checkpoint logs use on the driver, and sends executors only `spark.*`
keys, so executors (a cluster's too) never use it. Without the jar everything runs as
before.
"""
from __future__ import annotations

from engine.spark.jvm_jar import has_class

CLASS = "marketspread.hadoop.NioLocalFileSystem"


def use(spark) -> bool:
    """Make `spark`'s checkpoint logs use the class when its JVM has it; return whether.

    Asked of the JVM, not of the folder: a session started before the jar was built
    (`getOrCreate` hands back a running one) must keep Hadoop's class.
    """
    if not has_class(spark, CLASS):
        return False
    spark.conf.set("fs.file.impl", CLASS)
    return True
