"""Hosts with their own addresses on one machine: network namespaces on a virtual LAN.

Each host is a network namespace with a veth pair whose other end joins a bridge; the
bridge lives in a namespace of its own, so nothing of the machine's own network (its
addresses, routes, firewall) is touched, and deleting the namespaces removes every link.
The file system stays shared (`ip netns exec` changes the network only): the hosts see
one state folder, as a cluster's hosts see one NFS mount. Needs root and iproute2's `ip`.

    lan = Lan("ms1234")
    master = lan.add_host("master", "10.213.0.10")
    subprocess.run(master.wrap(["bash", "-c", "..."]))
    lan.delete()
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

PREFIX_LEN = 24


def netns_unavailable() -> str | None:
    """Return why namespaces cannot be built here (a skip reason), None if they can."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (scripts/setup installs it)"
    if os.geteuid() != 0:
        return "network namespaces need root (`ip netns add`); run as root to test hosts with their own addresses"
    probe = f"msprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`ip netns add` is not allowed here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


@dataclass(frozen=True)
class Host:
    """One namespace with one address on the LAN."""
    name: str
    netns: str
    address: str

    def wrap(self, argv: list[str]) -> list[str]:
        """Return `argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *argv]


class Lan:
    """A bridge in a namespace of its own and the hosts plugged into it; `delete` removes all."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.bridge_ns = f"{prefix}-lan"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._add_ns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._namespaces.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def add_host(self, name: str, address: str) -> Host:
        """Add a namespace `<prefix>-<name>` with `address`/24 on eth0, its peer on the bridge."""
        ns = f"{self.prefix}-{name}"
        self._add_ns(ns)
        port = f"p{len(self.hosts)}"
        _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "set", port, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        self.hosts[name] = Host(name, ns, address)
        return self.hosts[name]

    def delete(self) -> None:
        """Delete every namespace (their veths and the bridge go with them); never raises."""
        for ns in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._namespaces.clear()
