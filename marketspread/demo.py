"""The live demo: InfluxDB, ingress, job, dashboard and two senders on generated data.

The senders start only after the job's first commit: Spark takes ~10-20 s to start and
its first micro-batch pays for the Python workers, so senders started at once queued
~1.5M events and the dashboard's first minutes showed a start-up backlog (p99 of
seconds) instead of the job's steady state. A small primer (`PRIMER` quotes, each with
a start-up latency) goes first and is the first batch.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Mapping

from collector.influx.server import InfluxServer

from collector.influx import InfluxConfig
from collector.settings import child_environment
from engine.config import Config
from engine.formats.log import read_consumed, read_head
from engine.ingress.stats import read_stats
from engine.formats.batch import BatchTail
from engine.tools.generate import generate
from engine.tools.sender import send_files

log = logging.getLogger(__name__)
PRIMER = 1_000                 # quotes sent before the senders: the job's first batch
FIRST_COMMIT_TIMEOUT = 300.0   # seconds to wait for it (a cold JVM on a loaded machine)


def _spawn(args: list[str], log_path: Path, cfg: Config, env: Mapping[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "marketspread", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    pump_log(proc.stdout, log_path, cfg.process_log_bytes)
    return proc


def pump_log(stream, path: Path, max_bytes: int, backups: int = 3) -> threading.Thread:
    """Copy a child's output lines to `path`, rotated at `max_bytes` (`path.1` .. `path.<backups>`).

    The demo reads its children's output through a pipe rather than handing them the file:
    a file a child holds open cannot be rotated under it.
    """
    handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))

    def run():
        with stream:
            for line in iter(stream.readline, b""):
                handler.emit(logging.makeLogRecord({"msg": line.decode("utf-8", "replace").rstrip("\n")}))
        handler.close()
    t = threading.Thread(target=run, name=f"log-{path.name}", daemon=True)
    t.start()
    return t


def _stop(procs: list[subprocess.Popen]) -> None:
    # SIGTERM to the process itself (the job stops its query cleanly, then its JVM);
    # the whole group only if it does not end in time.
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _warm_up(cfg: Config, nbbo: Path, procs: list[subprocess.Popen], stop: dict, logs: Path) -> bool:
    """Send the primer and wait for the job's first commit; False if a process died or we were stopped."""
    if read_consumed(cfg.log_dir) > 0:          # a restart on an existing log: the job is past its first batch
        return True
    print("waiting for Spark to start and commit its first micro-batch (the senders start then) ...", flush=True)
    send_files(cfg.host, cfg.nbbo_port, [nbbo], max_messages=PRIMER, progress=False, connect_timeout=60.0)
    t0 = time.monotonic()
    while read_consumed(cfg.log_dir) == 0:
        dead = [p for p in procs if p.poll() is not None]
        if dead or stop["now"] or time.monotonic() - t0 > FIRST_COMMIT_TIMEOUT:
            why = f"a demo process exited (code {dead[0].returncode})" if dead else \
                ("stopped" if stop["now"] else f"no commit after {FIRST_COMMIT_TIMEOUT:.0f} s")
            print(f"{why} before the job's first commit; see {logs}", file=sys.stderr)
            return False
        time.sleep(0.2)
    print(f"the job committed its first batch after {time.monotonic() - t0:.1f} s", flush=True)
    return True


# The demo's results at its default rate reach the job's default size bound (10 GiB) in about
# three hours; a demo keeps less unless told otherwise (docs/OPERATIONS.md, "Retention and disk").
DEMO_RESULTS_BYTES = "1GiB"


def demo_retention(cfg: Config) -> tuple[str, str]:
    """The demo's results retention: the job's age bound, and a lower size bound unless one was set."""
    size = cfg.results_retention_bytes
    return cfg.results_retention, DEMO_RESULTS_BYTES if size == Config.results_retention_bytes else size


def run_demo(cfg: Config, rate: int = 50_000, duration: float | None = None, symbols: int = 350,
             ui_port: int = 8050, *, influx: InfluxConfig, own_server: bool) -> int:
    """Run the demo until Ctrl-C (or `duration` seconds); print a status line every 2 s.

    Metrics go to `influx` (`MS_INFLUX_*`), or, with `own_server`, to the project's server
    of the state folder, which the demo starts.
    """
    data = cfg.state_dir / "demo-data"
    logs = cfg.state_dir / "logs"
    data.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    nbbo, orders = data / f"nbbo-{symbols}.msg", data / f"orders-{symbols}.msg"
    if not (nbbo.exists() and orders.exists()):
        print(f"generating demo data in {data} ...", flush=True)
        generate(nbbo, orders, symbols=symbols, nbbo=1_000_000, orders=1_000_000, wide_share=0.1, seed=1)
    # the children's environment: this process's, plus the demo's state folder (and InfluxDB)
    env = child_environment({"PYSPARK_PYTHON": sys.executable, "MS_STATE_DIR": str(cfg.state_dir)})
    db, influx = influx.db, None        # from here on: the project's server, when the demo starts it
    if own_server:
        influx = InfluxServer(cfg.state_dir)
        status = influx.start()
        # URL and admin credentials for every child; a user's MS_INFLUX_DB stays
        env.update(influx.config(db=db).as_env())
        print(f"InfluxDB (metrics): {status.url}  database marketspread", flush=True)
    common = ["--host", cfg.host, "--nbbo-port", str(cfg.nbbo_port), "--orders-port", str(cfg.orders_port)]
    procs: list[subprocess.Popen] = []
    stop = {"now": False}

    def _on_signal(*_):
        stop["now"] = True
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    try:
        procs.append(_spawn(["ingress", *common, "--max-backlog", str(cfg.max_backlog),
                             "--shards", str(cfg.shards)], logs / "ingress.log", cfg, env))
        age, size = demo_retention(cfg)
        print(f"results kept: {age} or {size} at most (--results-retention, --results-retention-bytes)", flush=True)
        retention = ["--results-retention", age, "--results-retention-bytes", size,
                     "--checkpoint-batches", str(cfg.checkpoint_batches)]
        procs.append(_spawn(["job", "--master", cfg.master, "--shards", str(cfg.shards), *retention,
                             *([] if cfg.log_retention else ["--keep-log"])], logs / "job.log", cfg, env))
        procs.append(_spawn(["ui", "--host", "127.0.0.1", "--port", str(ui_port)], logs / "ui.log", cfg, env))
        print(f"dashboard: http://127.0.0.1:{ui_port}/", flush=True)
        if not _warm_up(cfg, nbbo, procs, stop, logs):
            return 1
        for port, f in ((cfg.nbbo_port, nbbo), (cfg.orders_port, orders)):
            procs.append(_spawn(["send", "--host", cfg.host, "--port", str(port), "--file", str(f),
                                 "--rate", str(rate), "--loop"], logs / f"send-{port}.log", cfg, env))
        print(f"demo running: ingress {cfg.host}:{cfg.nbbo_port}/{cfg.orders_port}, "
              f"{rate} msgs/s per stream, logs in {logs}; Ctrl-C stops", flush=True)
        tail = BatchTail(cfg.out_dir)
        t0 = time.monotonic()
        prev_c, prev_t = read_consumed(cfg.log_dir), t0
        while not stop["now"] and (duration is None or time.monotonic() - t0 < duration):
            time.sleep(2.0)
            dead = [p for p in procs if p.poll() is not None]
            if dead:
                print(f"a demo process exited (code {dead[0].returncode}); see {logs}", file=sys.stderr)
                return 1
            tail.poll()
            now, c, h = time.monotonic(), read_consumed(cfg.log_dir), read_head(cfg.log_dir)
            st = read_stats(cfg.log_dir) or {}
            print(f"[{now - t0:6.0f}s] ingested {h:>11,}  processed {c:>11,} "
                  f"({(c - prev_c) / (now - prev_t):>9,.0f}/s)  backlog {h - c:>9,}  "
                  f"results {tail.count:>9,}  bad {st.get('bad_total', 0)}  "
                  f"muted {'yes' if st.get('muted') else 'no'}", flush=True)
            prev_c, prev_t = c, now
    finally:
        _stop(procs[3:])            # senders first, then ui, job and ingress
        _stop(procs[:3])
        if influx is not None:
            influx.stop()
    return 0
