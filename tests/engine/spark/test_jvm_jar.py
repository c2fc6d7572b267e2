"""The project's jar: compiled by set-up with the real javac, named by its sources, shipped where needed."""
from __future__ import annotations

import zipfile

from engine.spark import jvm_archive, jvm_jar, local_fs
from engine.spark.source import JVM_SOURCE


def _class_file(name: str) -> str:
    return name.replace(".", "/") + ".class"


def test_no_jar_gives_no_conf_and_the_archive_keeps_its_name(tmp_path):
    assert jvm_jar.installed_jar(tmp_path) is None
    assert jvm_jar.session_conf("local[*]", tmp_path) == jvm_jar.session_conf("spark://h:7077", tmp_path) == {}
    assert "marketspread-jvm" not in jvm_archive.archive_path(tmp_path).name


def test_build_compiles_every_class_into_a_jar_named_by_its_sources(tmp_path):
    (tmp_path / "marketspread-jvm-000000000000.jar").write_bytes(b"a jar of older sources")
    (tmp_path / "nio-local-fs-000000000000.jar").write_bytes(b"the file system's own jar of an earlier version")
    jar = jvm_jar.build(tmp_path)
    assert jar == jvm_jar.jar_path(tmp_path) == jvm_jar.installed_jar(tmp_path)
    with zipfile.ZipFile(jar) as z:
        names = z.namelist()
    assert _class_file(local_fs.CLASS) in names and _class_file(JVM_SOURCE) in names
    assert [p.name for p in tmp_path.iterdir()] == [jar.name]          # the old jars are gone
    # The driver has it on its class path; a cluster's executors get it shipped (they run the source's readers).
    assert jvm_jar.session_conf("local[*]", tmp_path) == {"spark.driver.extraClassPath": str(jar)}
    assert jvm_jar.session_conf("spark://h:7077", tmp_path) == {"spark.driver.extraClassPath": str(jar),
                                                                "spark.jars": str(jar)}
    # The class archive is recorded with the jar on the class path, so it is named by it.
    assert jar.stem in jvm_archive.archive_path(tmp_path).name


def test_the_jar_name_follows_every_source_and_pysparks_version(tmp_path, monkeypatch):
    before = jvm_jar.jar_path(tmp_path)
    src = tmp_path / "java" / "x" / "Y.java"
    src.parent.mkdir(parents=True)
    src.write_text("package x; class Y {}")
    monkeypatch.setattr(jvm_jar, "SOURCE_DIR", tmp_path / "java")
    assert jvm_jar.sources() == [src]
    one = jvm_jar.jar_path(tmp_path)
    src.write_text("package x; class Y { int z; }")
    two = jvm_jar.jar_path(tmp_path)
    # ... and the PySpark whose jars it is compiled against (a pip upgrade compiles it again).
    import pyspark
    monkeypatch.setattr(pyspark, "__version__", pyspark.__version__ + ".post1")
    assert len({before, one, two, jvm_jar.jar_path(tmp_path)}) == 4
