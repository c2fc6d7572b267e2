"""How long after a driver's death someone is paged: SIGKILL a watched job, time the webhooks.

Each trial, in a fresh InfluxDB database and state folder: the dashboard runs (`marketspread
ui`, which evaluates the rules: the only process of the product left once the job dies); an
example job runs under `marketspread watch`; once its batches flow, two rules are added on
it, `batch_age > 20s` and `status = lost`, each with a webhook to a receiver here; then the
job's driver gets SIGKILL, and the time from the kill to each rule's FIRING webhook is
recorded. Everything at the default settings: the evaluator every 5 s, the monitor's
heartbeat every 5 s, a run lost after 15 s without one. The target (issue: a dead job pages
someone) is at most 30 s.

    .venv/bin/python -m bench.dead_job_alert                 # 3 trials, ~4 min
    .venv/bin/python -m bench.dead_job_alert --trials 5 --record

Figures are printed and written to `bench/out/` (`bench/results/` with `--record`); no
figure fails the benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, utc_stamp, write_result
from collector.influx import ensure_database
from collector.influx.server import InfluxServer, free_port
from perf.sysinfo import machine_summary

RULES = {"dead": "batch_age > 20s", "lost": "status = lost"}
TARGET_S = 30.0
JOB = "rate_windowed"


class _Receiver:
    """A loopback HTTP server keeping (arrival time, JSON body) of every POST."""

    def __init__(self):
        self.got: queue.Queue[tuple[float, dict]] = queue.Queue()
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got.put((time.time(), json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()



def _batches(client, job: str) -> int:
    series = client.query('SELECT count("batch_ms") FROM "spark_progress" WHERE "run" = $run', {"run": job})
    return sum(int(v[1]) for s in series for v in s.values)


def trial(n: int, server: InfluxServer, work: Path, receiver: _Receiver, logs: Path) -> dict:
    """Run one job, kill its driver, return the seconds from the kill to each rule's FIRING webhook."""
    client = server.client(db=f"dead_job_{n}")
    ensure_database(client)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(client.config.as_env(), MS_STATE_DIR=str(work / "state"), MS_WEBHOOK_ALLOW="127.0.0.1",
               PYSPARK_PYTHON=sys.executable)
    cli = [sys.executable, "-m", "marketspread"]
    with open(logs / f"trial{n}-ui.log", "w") as ui_log, open(logs / f"trial{n}-job.log", "w") as job_log:
        ui = subprocess.Popen(cli + ["ui", "--port", str(free_port())], cwd=ROOT, env=env, stdout=ui_log,
                              stderr=subprocess.STDOUT)
        job = subprocess.Popen(cli + ["watch", "--", "examples/rate_windowed.py", "--duration", "0", "--rate", "2000",
                                      "--work-dir", str(work / "job")], cwd=ROOT, env=env, stdout=job_log,
                               stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while _batches(client, JOB) < 5:
                if time.monotonic() > deadline or job.poll() is not None:
                    raise RuntimeError(f"the job wrote no batches: see {job_log.name}")
                time.sleep(1)
            for name, cond in RULES.items():
                subprocess.run(cli + ["alerts", "add", name, cond, "--job", JOB, "--webhook", receiver.url],
                               cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            time.sleep(12)                      # the evaluator reads the rules and sees the job alive
            killed = time.time()
            os.kill(job.pid, signal.SIGKILL)
            job.wait()
            fired: dict[str, float] = {}
            while len(fired) < len(RULES) and time.time() - killed < 120:
                try:
                    at, body = receiver.got.get(timeout=1)
                except queue.Empty:
                    continue
                if body.get("state") == "FIRING" and body.get("rule") in RULES:
                    fired.setdefault(body["rule"], at - killed)
            return {"trial": n, "seconds": fired}
        finally:
            for p in (job, ui):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(20)
                    except subprocess.TimeoutExpired:
                        p.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dead_job_alert", description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    add_record_flag(ap)
    a = ap.parse_args(argv)
    out = []
    receiver = _Receiver()
    with tempfile.TemporaryDirectory(prefix="dead-job-alert-") as tmp:
        server = InfluxServer(Path(tmp) / "influx", port=0)
        server.start()
        logs = ROOT / "bench" / "out" / "dead-job-alert-logs"
        logs.mkdir(parents=True, exist_ok=True)
        try:
            for n in range(a.trials):
                r = trial(n, server, Path(tmp) / f"t{n}", receiver, logs)
                out.append(r)
                print(f"trial {n}: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(r["seconds"].items())),
                      flush=True)
        finally:
            server.stop()
    medians = {rule: statistics.median([r["seconds"][rule] for r in out if rule in r["seconds"]])
               for rule in RULES if any(rule in r["seconds"] for r in out)}
    missed = {rule: sum(rule not in r["seconds"] for r in out) for rule in RULES}
    print("\nfrom SIGKILL to the FIRING webhook, median of "
          f"{a.trials}: " + ", ".join(f"{RULES[k]} {v:.1f} s" for k, v in medians.items()) +
          f" (target <= {TARGET_S:.0f} s; never fired: {missed})")
    path = write_result({"benchmark": "dead-job-alert", "utc": utc_stamp(), "rules": RULES, "trials": out,
                         "median_s": medians, "never_fired": missed, "target_s": TARGET_S,
                         "machine": machine_summary()}, result_path("dead-job-alert", a.record))
    print(f"figures: {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
