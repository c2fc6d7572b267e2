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
    assert set(blocks) == {"all", "master", "worker", "ingress", "driver", "senders"}, sorted(blocks)
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
