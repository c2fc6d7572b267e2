"""docs/CLUSTER.md, command for command, on hosts with their own addresses: results equal local[*]'s.

Six hosts on one virtual LAN (network namespaces, netns.py): a standalone master, two
workers, the driver, the ingress and the senders, each with its own address. The test
reads docs/CLUSTER.md's `sh host=...` blocks and runs each in its host's namespace, with
the addresses the doc's `host=all` block exports replaced by the LAN's: the master and the
workers as started by `spark-class`, `marketspread ingress --host`, `marketspread job
--master spark://...` with SPARK_LOCAL_IP, and the senders' `generate` and `send`. The
state folder is one directory of this machine's file system for every host (the doc's
shared mount). What the test adds to the doc's environment, it says: no InfluxDB
(MS_METRICS=false), the whole log kept (the exactness check reads it) and smaller batches
(so that both workers run several).

The results must equal the reference rule over the recorded arrival order (as
test_cluster.py checks), each worker must have run an executor, and the master and the
ingress must listen on their LAN address, not on loopback.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from engine.tools.sender import frame_bounds

from .harness import (ROOT, Fleet, Proc, check_exact, drain, listening_sockets, log_tail, read_head,
                      session_members, wait_until)
from .netns import Lan, netns_unavailable

DOC = ROOT / "docs" / "CLUSTER.md"
_BLOCK = re.compile(r"^```sh host=(\w+)\n(.*?)^```", re.M | re.S)
_EXPORT = re.compile(r"^export (\w+)=", re.M)
SUBNET = "10.213.0"
ADDRESSES = {"master": 10, "worker1": 11, "worker2": 12, "driver": 13, "ingress": 14, "senders": 20}
#: the test's additions to the doc's environment (the module docstring says why)
TEST_ENV = {"MS_METRICS": "false", "MS_LOG_RETENTION": "false", "MS_MAX_ROWS_PER_BATCH": "20000",
            "PYTHONUNBUFFERED": "1"}


def doc_blocks(text: str) -> dict[str, str]:
    """Return docs/CLUSTER.md's shell blocks by host role (all, master, worker, ingress, driver, senders)."""
    blocks: dict[str, str] = {}
    for role, body in _BLOCK.findall(text):
        assert role not in blocks, f"two `sh host={role}` blocks in {DOC.name}"
        blocks[role] = body
    return blocks


def _clean_env() -> dict[str, str]:
    """This process's environment without the settings a run must not inherit (MS_*, Spark's, a venv)."""
    drop = ("MS_", "SPARK_", "PYSPARK_")
    return {k: v for k, v in os.environ.items()
            if not k.startswith(drop) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.fixture
def lan():
    """Six namespaces on one bridge; deleted after the test, also when it fails."""
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    net = Lan(f"ms{os.getpid()}")
    try:
        for name, last in ADDRESSES.items():
            net.add_host(name, f"{SUBNET}.{last}")
        yield net
    finally:
        net.delete()


@pytest.fixture
def fleet(tmp_path):
    """The hosts' processes; all stopped after the test, before the namespaces go."""
    (tmp_path / "logs").mkdir()
    f = Fleet(tmp_path / "logs", cwd=tmp_path)
    try:
        yield f
    finally:
        f.stop_all()


class Hosts:
    """Runs the doc's blocks in the hosts' namespaces with the LAN's addresses."""

    def __init__(self, lan: Lan, fleet: Fleet, exports: dict[str, str], tmp: Path):
        self.lan, self.fleet, self.tmp = lan, fleet, tmp
        # PYTHONPATH: every process imports this work tree's code (as harness.fleet_for's do)
        self.env = {**_clean_env(), **exports, **TEST_ENV, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}

    def start(self, host: str, script: str, name: str, **env: str) -> Proc:
        """Start a block that runs until stopped (a server) in `host`'s namespace."""
        log = self.fleet.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            p = subprocess.Popen(self.lan.hosts[host].wrap(["bash", "-ec", script]), cwd=self.tmp,
                                 env={**self.env, **env}, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.fleet.procs.append(Proc(name, p, log))
        return self.fleet.procs[-1]

    def run(self, host: str, script: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        """Run a block to its end in `host`'s namespace."""
        return subprocess.run(self.lan.hosts[host].wrap(["bash", "-ec", script]), cwd=cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def stop(self, proc: Proc, timeout: float = 90) -> int:
        """Stop a `marketspread` block as Ctrl-C would (SIGTERM to the command, not its shell); return its code."""
        for pid in session_members(proc.popen.pid):
            if _comm(pid) == "marketspread":
                os.kill(pid, signal.SIGTERM)
        proc.popen.wait(timeout=timeout)
        self.fleet.stop(proc)
        return proc.popen.returncode


def _log_has(proc: Proc, text: str, count: int = 1) -> bool:
    return proc.log_path.read_text(errors="replace").count(text) >= count


def test_cluster_doc_on_hosts_with_their_own_addresses(lan, fleet, tmp_path):
    blocks = doc_blocks(DOC.read_text())
    assert set(blocks) == {"all", "master", "worker", "ingress", "driver", "senders", "watch"}, sorted(blocks)
    state = tmp_path / "state"                      # the "shared mount": one folder every namespace sees
    addr = {name: h.address for name, h in lan.hosts.items()}
    exports = {"MASTER_HOST": addr["master"], "DRIVER_HOST": addr["driver"], "INGRESS_HOST": addr["ingress"],
               "MS_HOME": str(ROOT), "MS_STATE_DIR": str(state)}
    assert set(_EXPORT.findall(blocks["all"])) == set(exports), "the doc's addresses changed: update the test"
    hosts = Hosts(lan, fleet, exports, tmp_path)
    t0 = time.monotonic()

    master = hosts.start("master", blocks["master"], "master")
    wait_until(lambda: _log_has(master, "I have been elected leader"), 90, "the master", [master])
    workers = [hosts.start(w, blocks["worker"], w, WORKER_HOST=addr[w]) for w in ("worker1", "worker2")]
    wait_until(lambda: _log_has(master, "Registering worker", 2), 90, "two workers to register",
               [master, *workers])
    ingress = hosts.start("ingress", blocks["ingress"], "ingress")
    wait_until(lambda: _log_has(ingress, "ingress listening on"), 60, "the ingress", [ingress])
    job = hosts.start("driver", blocks["driver"], "job")
    wait_until(lambda: _log_has(job, "job started"), 240, "the job to start", [job, master, *workers])
    t_ready = time.monotonic()

    for p, where in ((master, addr["master"]), (ingress, addr["ingress"])):
        socks = [(a.removeprefix("::ffff:"), port) for c in session_members(p.popen.pid)
                 for a, port in listening_sockets(c)]
        assert any(a == where for a, _ in socks), (p.name, socks)
        assert not any(a.startswith("127.") for a, port in socks if port in (7001, 7002, 7077)), (p.name, socks)

    data = tmp_path / "senders"
    data.mkdir()
    r = hosts.run("senders", blocks["senders"], data, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    messages = sum(len(frame_bounds((data / f).read_bytes())) - 1 for f in ("nbbo.msg", "orders.msg"))
    wait_until(lambda: read_head(state / "ingress") >= messages, 60, f"the ingress to log {messages} messages",
               [ingress])
    t_sent = time.monotonic()
    drain(state, job, 180)
    t_drained = time.monotonic()
    assert hosts.stop(ingress) == 0, log_tail(ingress.log_path)
    assert hosts.stop(job) == 0, log_tail(job.log_path)
    assert _log_has(master, "app-"), "the job did not register with the master"
    for w in ("worker1", "worker2"):                # an executor of the job ran on each worker
        assert list((tmp_path / f"spark-work-{addr[w]}").glob("app-*/*/stderr")), f"no executor on {w}"

    ex = check_exact(state)
    print(f"\nFIGURES multihost: {ex.logged} events, {ex.committed} results over 6 hosts on {SUBNET}.0/24 "
          f"(2 workers, 2 shards); cluster up and job started in {t_ready - t0:.1f} s; sent and logged in "
          f"{t_sent - t_ready:.1f} s; committed {ex.logged / max(t_drained - t_ready, 1e-9):,.0f} events/s "
          f"from the first send")
    assert ex.exact, ex
    assert ex.expected > 1000


_FIGURES = """
import json
from collector.influx import InfluxClient, InfluxConfig
c = InfluxClient(InfluxConfig.from_env())
heap = {s.tags["executor"]: [v[1] for v in s.values]
        for s in c.query('SELECT "heap_used_bytes" FROM "spark_executor" GROUP BY "executor"')}
runs = [v[1] for s in c.query('SELECT "status" FROM "runs"') for v in s.values]
print(json.dumps({"heap": heap, "runs": runs}))
"""


def test_watch_on_a_cluster_master_relays_the_executors_figures_and_no_one_elses(lan, fleet, tmp_path):
    """docs/CLUSTER.md section 7: a user's script under `watch` on the cluster, a hostile line from another host."""
    blocks = doc_blocks(DOC.read_text())
    state = tmp_path / "state"
    addr = {name: h.address for name, h in lan.hosts.items()}
    exports = {"MASTER_HOST": addr["master"], "DRIVER_HOST": addr["driver"], "INGRESS_HOST": addr["ingress"],
               "MS_HOME": str(ROOT), "MS_STATE_DIR": str(state)}
    hosts = Hosts(lan, fleet, exports, tmp_path)
    master = hosts.start("master", blocks["master"], "master")
    wait_until(lambda: _log_has(master, "I have been elected leader"), 90, "the master", [master])
    worker = hosts.start("worker1", blocks["worker"], "worker1", WORKER_HOST=addr["worker1"])
    wait_until(lambda: _log_has(master, "Registering worker"), 90, "the worker to register", [master, worker])
    script = blocks["watch"].replace("--duration 30", "--duration 40")
    watch = hosts.start("driver", script, "watch", MS_METRICS="true")
    try:
        wait_until(lambda: _log_has(master, "Registered app"), 120,
                   "the watched application to register", [watch, master, worker])
        relay = []

        def relay_listening() -> bool:
            relay[:] = [port for pid in session_members(watch.popen.pid) if _comm(pid) == "marketspread"
                        for a, port in listening_sockets(pid) if a.removeprefix("::ffff:") == addr["driver"]]
            return bool(relay)
        wait_until(relay_listening, 60, "the relay to listen on the driver's address", [watch])
        drivers = [(a.removeprefix("::ffff:"), port) for pid in session_members(watch.popen.pid)
                   for a, port in listening_sockets(pid)]
        assert not any(a.startswith("127.") or a in ("0.0.0.0", "::") for a, port in drivers if port in relay)
        # a sender on another host that knows the format but not the session's secret prefix
        now = int(time.time())
        fake = "".join(f"{p}.app-1.phantom.jvm.heap.used 999 {now}\\n" for p in ("spark", "sparkmon", "ms"))
        for port in relay:
            r = hosts.run("senders", f"printf '{fake}' > /dev/tcp/{addr['driver']}/{port} || true", tmp_path, 30)
            assert r.returncode == 0, r.stderr
        watch.popen.wait(timeout=240)
        assert watch.popen.returncode == 0, log_tail(watch.log_path)
        assert "beyond loopback" in watch.log_path.read_text(errors="replace")      # the wide bind, said once
        (tmp_path / "figures.py").write_text(_FIGURES)
        r = hosts.run("driver", f". {ROOT}/.venv/bin/activate && python {tmp_path / 'figures.py'}", ROOT, 60)
        assert r.returncode == 0, r.stderr[-3000:]
        figures = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        hosts.run("driver", f". {ROOT}/.venv/bin/activate && marketspread influxdb stop", ROOT, 60)
    executors = set(figures["heap"])
    assert "driver" in executors and executors - {"driver"}, executors      # the worker's executor reported
    assert "phantom" not in executors
    assert all(v != 999 for vs in figures["heap"].values() for v in vs)
    assert figures["runs"] and set(figures["runs"]) <= {"stopped", "finished"}, figures["runs"]
