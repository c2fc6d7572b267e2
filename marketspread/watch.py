"""`marketspread watch -- job.py [args]`: run a user's PySpark script with the monitor attached.

The script never imports this project. Before it runs, `SparkSession.Builder.getOrCreate`
is wrapped: each session the script builds (a second one after `spark.stop()` too) gets
the Spark properties that send Spark's own metrics (executors' JVM heap, GC, CPU, tasks,
shuffle) to a monitor's relay, unless the script set a metrics sink itself, and then
`monitor()` is attached to it, so every streaming query the script starts is followed
from its first batch; a monitor stops with its session. The script runs in this process
as `python job.py args` would run it (`__main__`, its own `sys.argv` and folder on
`sys.path`); its exit code is the command's. Settings are the same as every other
command's (`MS_STATE_DIR`, `MS_INFLUX_URL`, `MS_INFLUX_DB`, credentials: docs/METRICS.md).

Signals reach the script as they would under `python`: SIGINT raises KeyboardInterrupt,
SIGTERM raises SystemExit in its main thread, so its `finally` blocks and `spark.stop()`
run; then the monitors stop (the last intervals written, open runs ended stopped) and the
command exits 130 or 143. A script that raises ends its open runs failed, with its
exception as the reason.
"""
from __future__ import annotations

import argparse
import logging
import os
import runpy
import socket
import sys
import traceback
from pathlib import Path
from typing import Mapping

from collector.names import InvalidName, check_name
from collector.settings import spark_launch_env
from marketspread.script_signals import ScriptSignals

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add `watch`'s arguments."""
    p.add_argument("--run", help="run tag of the script's unnamed queries (default: the application's name)")
    p.add_argument("--no-executor-metrics", dest="executor_metrics", action="store_false",
                   help="do not send Spark's metrics system (executors' JVM figures) to the monitor")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="address Spark's executors send their metrics to (the driver's; default 127.0.0.1); "
                        "the relay listens there and takes only the session's own reports")
    p.add_argument("script", type=Path, help="the PySpark script to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


class _Attach:
    """Wrap `getOrCreate` so each session the script builds gets the metrics sink and a monitor.

    `conf_fn()` returns the metrics sink's properties for a new session (a relay listening
    already, adopted by its monitor); `{}` leaves the sink off.
    """

    def __init__(self, run: str | None, conf_fn, launch_env: Mapping[str, str]):
        self.run, self.conf_fn, self.launch_env = run, conf_fn, launch_env
        self.monitors: list = []
        self.original = None

    @property
    def monitor(self):
        """The monitor of the script's current session, while it runs."""
        live = [m for m in self.monitors if m is not None and m.listener is not None]
        return live[-1] if live else None

    def install(self) -> None:
        from pyspark.sql import SparkSession  # lazy: only `watch` needs PySpark in the CLI's process
        self.original = SparkSession.Builder.getOrCreate
        attach = self

        def getOrCreate(builder):
            current = attach.monitor
            if current is None:
                options = getattr(builder, "_options", {})
                if not any(k.startswith("spark.metrics.conf.") for k in options):
                    for k, v in attach.conf_fn().items():
                        builder.config(k, v)
                for k, v in loopback_conf(options, attach.launch_env).items():
                    if k == LOCAL_IP:
                        os.environ.setdefault("SPARK_LOCAL_IP", v)     # read by the JVM at launch: the UI bind address
                    else:
                        builder.config(k, v)
            spark = attach.original(builder)
            if current is None or current.spark.sparkContext is not spark.sparkContext:
                attach.monitors.append(_start_monitor(spark, attach.run))
            return spark

        SparkSession.Builder.getOrCreate = getOrCreate

    def uninstall(self) -> None:
        if self.original is not None:
            from pyspark.sql import SparkSession  # lazy: as in install
            SparkSession.Builder.getOrCreate = self.original

    def stop(self, failure=None) -> None:
        """Stop every monitor still running; `failure` ends their open runs failed with it."""
        for m in self.monitors:
            if m is None or m.listener is None:
                continue
            try:
                m.stop(failure=failure)
            except Exception:
                log.exception("watch: stopping the monitor failed")


LOCAL_IP = "SPARK_LOCAL_IP"


def loopback_conf(options: Mapping[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """Return what turns Spark UI's kill links off and binds a local-master session to loopback.

    The driver's RPC and block manager bind to `spark.driver.bindAddress`; Spark's UI binds
    to `SPARK_LOCAL_IP`, else all addresses. Only what the user left unset is set: their
    own builder options, `SPARK_LOCAL_IP` and `--master` in `PYSPARK_SUBMIT_ARGS` win. With
    a cluster master the driver binds where the user's configuration says executors reach
    it; the kill links are off there too.
    """
    submit = environ.get("PYSPARK_SUBMIT_ARGS", "").split()
    master = options.get("spark.master") or next(
        (b for a, b in zip(submit, submit[1:]) if a == "--master"), "local[*]")
    conf = {"spark.ui.killEnabled": "false"}
    if master.startswith("local") and not environ.get(LOCAL_IP) and not {"spark.driver.bindAddress", "spark.driver.host"} & set(options):
        conf.update({"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1",
                     LOCAL_IP: "127.0.0.1"})
    return {k: v for k, v in conf.items() if k not in options}


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
    conf_fn = dict
    if executor_metrics:
        from spark_listener.monitor import close_unused_relays, executor_metrics_conf  # lazy: PySpark only for `watch`

        def conf_fn() -> dict[str, str]:
            """Start a relay as a session without its own sink is built (before its SparkContext), else none."""
            try:
                return executor_metrics_conf(metrics_host)     # warns in one line on a bind beyond loopback
            except (OSError, ValueError) as e:
                log.error("watch: executor metrics off: cannot listen on %s for Spark's metrics (%s)", metrics_host, e)
                return {}
    # `python` takes its workers' interpreter only from PYSPARK_PYTHON (engine/spark/session.py):
    # this one, so the script's tasks can import what record_latency needs
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    attach = _Attach(run, conf_fn, spark_launch_env())
    attach.install()
    signals = ScriptSignals(on_interrupt=_drop_main_py4j_connection).install()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    code = 0
    failure = None
    try:
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int) and e.code is not None:
                print(e.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
        except BaseException as e:
            traceback.print_exc()
            failure = _failure_of(e)
            code = 1
    finally:
        sys.argv, sys.path = saved_argv, saved_path
        signals.flushing()
        attach.stop(failure)
        attach.uninstall()
        if executor_metrics:
            close_unused_relays()
        signals.uninstall()
    if signals.received and code == 0:
        code = 128 + signals.received
    return code


def _drop_main_py4j_connection() -> None:
    """Leave the main thread's py4j connection to the call a signal interrupted; its next call opens another.

    PySpark pins one connection to each thread; the JVM side of an interrupted call
    (`awaitTermination()`) still runs and reads nothing more from it, so the script's
    `query.stop()` on the same connection would wait for ever.
    """
    from pyspark import SparkContext  # lazy: PySpark, only once the script runs
    gateway = SparkContext._gateway
    client = getattr(gateway, "_gateway_client", None)
    connection = client.get_thread_connection() if hasattr(client, "get_thread_connection") else None
    sock = getattr(connection, "socket", None)
    if sock is None:
        return
    connection.socket = connection.stream = None
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _failure_of(exc: BaseException):
    """The failure reason of the script's own exception (the same parser as a query's)."""
    from spark_listener.monitor import failure_of  # lazy: PySpark only for `watch`
    return failure_of(exc)


def run(args) -> int:
    """Run the `watch` command."""
    script_args = list(args.args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    try:
        return watch(args.script, script_args, args.run, args.executor_metrics, args.metrics_host)
    except InvalidName as e:
        raise ValueError(str(e)) from None
