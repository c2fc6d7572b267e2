"""Where a webhook may go: public addresses only, unless an allow-list names the target.

A rule's webhook is typed by a user, and the evaluator POSTs from inside the deployment,
so an unchecked URL reaches what the user cannot: InfluxDB's `/query` on loopback, a cloud
metadata service on 169.254.169.254, anything on the private network. `WebhookPolicy`
refuses loopback, link-local, private, multicast and other non-global addresses (IPv4
embedded in IPv6 is unwrapped first) unless `MS_WEBHOOK_ALLOW` permits them:
comma-separated CIDRs / addresses (`127.0.0.1`, `10.1.0.0/16`) or host names
(`hooks.internal`, matched against the URL's host).

The check runs on the resolved addresses, at `alerts add` and the UI's save (a clear
error) and again at each send (`resolve_target`): the sender connects to exactly the
addresses checked there, so a name that re-resolves to a private address between add
and send (DNS rebinding), or between check and connect, gets nowhere. `resolve` is a
parameter of the design: the default asks the system resolver; tests give their own.

>>> policy = WebhookPolicy.parse("127.0.0.1, hooks.internal")
>>> policy.refusal("http://127.0.0.1:9/hook", "127.0.0.1") is None
True
>>> WebhookPolicy().refusal("http://127.0.0.1:9/hook", "127.0.0.1")
'loopback address'
"""
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence
from urllib.parse import urlsplit

from collector.settings import prefixed_env

ENV_ALLOW = "MS_WEBHOOK_ALLOW"
MAX_ADDRESSES = 8                      # connect attempts per send (each bounded by the timeout)
# IPv6 prefixes whose last 32 bits are an IPv4 address: NAT64 (well-known, local-use /48 as a
# /96 gateway writes it) and SIIT's IPv4-translated addresses
_CARRY_V4 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::ffff:0:0:0/96"))

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]


class WebhookRefused(ValueError):
    """A webhook target the policy refuses; the message is safe to show (no resolved address)."""


def system_resolve(host: str, port: int) -> list[str]:
    """Return the addresses of `host` (TCP), in the system resolver's order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(info[4][0] for info in infos))


def _embedded_v4(ip: Address) -> Address:
    """Return the IPv4 address an IPv6 one carries (mapped, translated, compatible, 6to4, NAT64), else `ip`.

    A stack or a gateway may deliver any of these forms to the IPv4 address inside, so
    `[::127.0.0.1]` must be judged as 127.0.0.1.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if any(ip in n for n in _CARRY_V4) or (int(ip) >> 32 == 0 and int(ip) > 1):    # not :: or ::1
            return low
    return ip


def address_class(ip: Address) -> str | None:
    """Return why `ip` is internal ("loopback", "private", ...), None if it is a public address."""
    ip = _embedded_v4(ip)
    for kind, test in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                       ("multicast", ip.is_multicast), ("unspecified", ip.is_unspecified),
                       ("private", ip.is_private)):
        if test:
            return kind
    return None if ip.is_global else "reserved"


@dataclass(frozen=True)
class WebhookPolicy:
    """Which internal webhook targets are allowed: networks and host names (default: none)."""
    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str | None) -> "WebhookPolicy":
        """Parse `10.0.0.0/8, 127.0.0.1, hooks.internal`; raise ValueError naming a bad entry."""
        networks, hosts = [], set()
        for entry in (e.strip() for e in (text or "").split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            name = entry.lower().rstrip(".")
            if not name or len(name) > 253 or not all(
                    part and len(part) <= 63 and part.replace("-", "").isalnum() and part.isascii()
                    for part in name.split(".")):
                raise ValueError(f"{ENV_ALLOW}: {entry[:60]!r} is neither a CIDR, an address nor a host name")
            hosts.add(name)
        return cls(tuple(networks), frozenset(hosts))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "WebhookPolicy":
        """Build from `MS_WEBHOOK_ALLOW`, None: this process's (raise ValueError on a bad entry)."""
        return cls.parse(prefixed_env(ENV_ALLOW, environ).get(ENV_ALLOW))

    def refusal(self, host: str, address: str) -> str | None:
        """Return why a connection to `address` (resolved from `host`) is refused, None if allowed."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])        # drop an IPv6 zone id
        kind = address_class(ip)
        if kind is None or host.lower().rstrip(".") in self.hosts:
            return None
        if any(a.version == n.version and a in n for a in (ip, _embedded_v4(ip)) for n in self.networks):
            return None
        return f"{kind} address"


@dataclass(frozen=True)
class Target:
    """A checked webhook target: the URL's parts and the addresses to connect to (all allowed)."""
    scheme: str
    host: str
    port: int
    addresses: tuple[str, ...]


def resolve_target(url: str, policy: WebhookPolicy, resolve: Resolver = system_resolve) -> Target:
    """Resolve a webhook URL once and check every address; raise WebhookRefused or OSError.

    One refused address refuses the whole target: a name answering with a public and a
    private address is how rebinding slips through a check of only the first.
    """
    parts = urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if scheme not in ("http", "https") or not host:
        raise WebhookRefused("refused: not an http(s) URL with a host")
    port = parts.port or (443 if scheme == "https" else 80)
    addresses = tuple(resolve(host, port))[:MAX_ADDRESSES]
    if not addresses:
        raise OSError(f"{host} has no address")
    for address in addresses:
        why = _why(policy, host, address)
        if why:
            raise WebhookRefused(f"refused: {why}")
    return Target(scheme, host, port, addresses)


def _why(policy: WebhookPolicy, host: str, address: str) -> str | None:
    try:
        return policy.refusal(host, address)
    except ValueError:
        return "non-IP address"


def check_webhook_target(url: str, policy: WebhookPolicy, resolve: Resolver = system_resolve) -> str | None:
    """Check a webhook as a rule is saved; raise WebhookRefused, or return a note if it does not resolve now.

    A name that does not resolve yet is accepted (it is checked again at every send);
    the message of a refusal names the host and the kind of address, never the address.
    """
    try:
        resolve_target(url, policy, resolve)
    except WebhookRefused as e:
        host, kind = urlsplit(url).hostname or "", str(e).removeprefix("refused: ")
        article = "an" if kind[0] in "aeiou" else "a"
        raise WebhookRefused(f"webhook host {host[:80]!r} resolves to {article} {kind}: refused "
                             f"(an operator can allow internal targets with {ENV_ALLOW})") from None
    except OSError:
        return f"webhook host {urlsplit(url).hostname!r} does not resolve now; it is checked again at each send"
    return None
