"""`marketspread jvm-archive`: the driver JVM's install artefacts, made once.

First the project's jar (engine/spark/jvm_jar.py: the checkpoint file system and the
ingress source), compiled with the JDK's `javac`; then the class archive
(engine/spark/jvm_archive.py), the classes a JVM loaded during a small replay through the
same path as every run (session, ingress source, query, the warm-up job), recorded with
that jar on the class path, each of them linked first (so that the archive keeps it).
"""
from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from engine.config import Config
from engine.spark import jvm_archive, jvm_jar
from engine.spark.session import build_session
from engine.tools.generate import generate
from marketspread.replay import QUICK_START, replay

log = logging.getLogger(__name__)


def make_archive(cfg: Config, folder: Path = jvm_archive.ARCHIVE_DIR) -> Path:
    """Build the project's jar, run a 20,000-message replay in a recording JVM,
    then dump its classes; return the archive. (`folder` other than the venv's: tests.)"""
    t0 = time.monotonic()
    try:
        log.info("the project's JVM classes: %s", jvm_jar.build(folder))
    except RuntimeError as e:            # no JDK compiler: Hadoop's and Python's classes, as before
        log.warning("%s; the checkpoint logs keep Hadoop's local file system (a forked chmod per file) "
                    "and the ingress source is Python's (Python processes to start)", e)
    with tempfile.TemporaryDirectory(prefix="ms-jvm-archive-") as tmp:
        work = Path(tmp)
        nbbo, orders = work / "nbbo.msg", work / "orders.msg"
        generate(nbbo, orders, symbols=100, nbbo=10_000, orders=10_000, seed=7)
        class_log = work / "loaded-classes.log"
        opts = f"{QUICK_START['spark.driver.extraJavaOptions']} {jvm_archive.record_options(class_log)}"
        spark = build_session(cfg.master, shards=cfg.shards, extra={"spark.driver.extraJavaOptions": opts},
                              archive=False)
        try:
            replay([nbbo], [orders], work / "results.msg", replace(cfg, state_dir=work / "state"),
                   spark=spark, ship_metrics=False)
            path = jvm_archive.dump(spark, folder, class_log)
        finally:
            spark.stop()
    log.info("JVM class archive %s (%.0f MB) in %.1f s", path, path.stat().st_size / 1e6, time.monotonic() - t0)
    return path
