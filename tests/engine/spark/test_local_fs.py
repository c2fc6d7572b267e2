"""The checkpoint logs' local file system: built by set-up, used by the driver, harmless when absent.

Real javac, a real JVM and a real Spark session; no timing is asserted here (the
figures are in docs/PERFORMANCE.md, "Design decisions": checkpoint logs without a forked `chmod`).
"""
from __future__ import annotations

import os
import stat

import pytest

from engine.spark import jvm_jar, local_fs


def _installed_or_fail():
    if jvm_jar.installed_jar() is None:
        msg = f"no project jar at {jvm_jar.jar_path()} (scripts/setup builds it)"
        if os.environ.get("CI"):
            pytest.fail(msg)               # in CI a missing jar is a set-up bug
        pytest.skip(msg)


def test_the_sessions_checkpoint_files_are_made_without_hadoops_chmod(spark, tmp_path):
    """The checkpoint logs' Hadoop conf resolves file: to the class; files and folders get Hadoop's modes."""
    _installed_or_fail()
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    root = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri())
    assert root.getFileSystem(conf).getClass().getName() == local_fs.CLASS
    # As the offset and commit logs write their entries (FileSystemBasedCheckpointFileManager).
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(root, conf)
    manager.mkdirs(jvm.org.apache.hadoop.fs.Path((tmp_path / "offsets").as_uri()))
    out = manager.createAtomic(jvm.org.apache.hadoop.fs.Path((tmp_path / "offsets" / "0").as_uri()), False)
    out.write(b"v1\n{}")
    out.close()
    assert (tmp_path / "offsets" / "0").read_bytes() == b"v1\n{}"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "offsets" / "0").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "offsets").stat().st_mode) == 0o777 & ~umask
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir()) == ["0"]   # no temp file, no .crc


def test_the_class_stays_off_what_executors_get(spark):
    """Only the session's SQL conf names it: Spark sends executors `spark.*` keys, never `fs.file.impl`."""
    _installed_or_fail()
    assert spark.conf.get("fs.file.impl") == local_fs.CLASS
    assert spark.sparkContext.getConf().get("spark.hadoop.fs.file.impl") == "org.apache.hadoop.fs.RawLocalFileSystem"
    assert spark.sparkContext._jsc.hadoopConfiguration().get("fs.file.impl") == "org.apache.hadoop.fs.RawLocalFileSystem"


class _NoClassJvm:
    """A JVM without the class on its class path, as py4j reports a ClassNotFoundException."""

    class java:
        class lang:
            class Class:
                @staticmethod
                def forName(name):
                    raise RuntimeError(f"java.lang.ClassNotFoundException: {name}")


class _Session:
    def __init__(self):
        self._jvm = _NoClassJvm()
        self.set = {}

    @property
    def conf(self):
        return self

    def get(self, key):
        return self.set.get(key)


def test_a_session_without_the_class_keeps_hadoops():
    """A session started before the jar was built (getOrCreate hands it back) must not name a missing class."""
    session = _Session()
    assert local_fs.use(session) is False
    assert session.set == {}
