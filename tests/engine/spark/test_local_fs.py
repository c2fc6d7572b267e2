"""The checkpoint logs' local file system: built by set-up, used by the driver, harmless when absent.

Real javac, a real JVM and a real Spark session; no timing is asserted here (the
figures are in bench/README.md, "Issue 17, session 12").
"""
from __future__ import annotations

import os
import stat
import zipfile

import pytest

from engine.spark import jvm_archive, local_fs

CLASS_FILE = local_fs.CLASS.replace(".", "/") + ".class"


def test_no_jar_gives_no_conf_and_the_archive_keeps_its_name(tmp_path):
    assert local_fs.installed_jar(tmp_path) is None
    assert local_fs.session_conf(tmp_path) == {}
    assert "nio-local-fs" not in jvm_archive.archive_path(tmp_path).name


def test_build_compiles_the_class_into_a_jar_named_by_its_source(tmp_path):
    (tmp_path / "nio-local-fs-000000000000.jar").write_bytes(b"a jar of an older source")
    jar = local_fs.build(tmp_path)
    assert jar == local_fs.jar_path(tmp_path) == local_fs.installed_jar(tmp_path)
    with zipfile.ZipFile(jar) as z:
        assert CLASS_FILE in z.namelist()
    assert [p.name for p in tmp_path.iterdir()] == [jar.name]          # the old jar is gone
    assert local_fs.session_conf(tmp_path) == {"spark.driver.extraClassPath": str(jar)}
    # The class archive is recorded with the jar on the class path, so it is named by it.
    assert jar.stem in jvm_archive.archive_path(tmp_path).name


def _installed_or_fail():
    if local_fs.installed_jar() is None:
        msg = f"no checkpoint file system jar at {local_fs.jar_path()} (scripts/setup builds it)"
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
