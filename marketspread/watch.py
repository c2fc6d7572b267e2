"""`marketspread watch -- job.py [args]`: run a user's PySpark script with the monitor attached.

The script never imports this project. Before it runs, `SparkSession.Builder.getOrCreate`
is wrapped: the first session the script builds gets the Spark properties that send
Spark's own metrics (executors' JVM heap, GC, CPU, tasks, shuffle) to the monitor's
relay, unless the script set a metrics sink itself, and then `monitor()` is attached to
it, so every streaming query the script starts is followed from its first batch. The
script runs in this process as `python job.py args` would run it (`__main__`, its own
`sys.argv` and folder on `sys.path`); its exit code is the command's. Settings are the
same as every other command's (`MS_STATE_DIR`, `MS_INFLUX_URL`, `MS_INFLUX_DB`,
credentials: docs/METRICS.md).
"""
from __future__ import annotations

import argparse
import logging
import os
import runpy
import sys
import traceback
from pathlib import Path

from collector.names import InvalidName, check_name

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add `watch`'s arguments."""
    p.add_argument("--run", help="run tag of the script's unnamed queries (default: the application's name)")
    p.add_argument("--no-executor-metrics", dest="executor_metrics", action="store_false",
                   help="do not send Spark's metrics system (executors' JVM figures) to the monitor")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="address Spark's executors send their metrics to (the driver's; default 127.0.0.1)")
    p.add_argument("script", type=Path, help="the PySpark script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


class _Attach:
    """Wrap `getOrCreate` so the script's first session gets the metrics sink and the monitor."""

    def __init__(self, run: str | None, conf: dict[str, str]):
        self.run, self.conf = run, conf
        self.monitor = None
        self.original = None

    def install(self) -> None:
        from pyspark.sql import SparkSession  # lazy: only `watch` needs PySpark in the CLI's process
        self.original = SparkSession.Builder.getOrCreate
        attach = self

        def getOrCreate(builder):
            if attach.monitor is None:
                options = getattr(builder, "_options", {})
                if not any(k.startswith("spark.metrics.conf.") for k in options):
                    for k, v in attach.conf.items():
                        builder.config(k, v)
            spark = attach.original(builder)
            if attach.monitor is None:
                attach.monitor = _start_monitor(spark, attach.run)
            return spark

        SparkSession.Builder.getOrCreate = getOrCreate

    def uninstall(self) -> None:
        if self.original is not None:
            from pyspark.sql import SparkSession  # lazy: as in install
            SparkSession.Builder.getOrCreate = self.original

    def stop(self) -> None:
        if self.monitor is not None:
            try:
                self.monitor.stop()
            except Exception:
                log.exception("watch: stopping the monitor failed")


def _start_monitor(spark, run):
    """Attach the monitor; a monitor that cannot start is reported and the script goes on."""
    from spark_listener.monitor import monitor  # lazy: PySpark, imported once a session exists
    try:
        return monitor(spark, run)
    except Exception as e:
        log.error("watch: the monitor could not start (%s); the script runs unmonitored", e)
        return None


def watch(script: Path, args: list[str], run: str | None = None, executor_metrics: bool = True,
          metrics_host: str = "127.0.0.1") -> int:
    """Run `script` with `args` under the monitor; return its exit code."""
    if not script.is_file():
        raise ValueError(f"{script}: no such script")
    if run is not None:
        check_name(run, "run")
    conf: dict[str, str] = {}
    if executor_metrics:
        from spark_listener.monitor import close_unused_relays, executor_metrics_conf  # lazy: PySpark only for `watch`
        conf = executor_metrics_conf(metrics_host)
    # `python` takes its workers' interpreter only from PYSPARK_PYTHON (engine/spark/session.py):
    # this one, so the script's tasks can import what record_latency needs
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    attach = _Attach(run, conf)
    attach.install()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    code = 0
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.argv, sys.path = saved_argv, saved_path
        attach.stop()
        attach.uninstall()
        if executor_metrics:
            close_unused_relays()
    return code


def run(args) -> int:
    """Run the `watch` command."""
    script_args = list(args.args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    try:
        return watch(args.script, script_args, args.run, args.executor_metrics, args.metrics_host)
    except InvalidName as e:
        raise ValueError(str(e)) from None
