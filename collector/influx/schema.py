"""The metrics database's layout: its retention policies, and creating them (as Telegraf does).

Used by the writer when a database or policy is missing, by `marketspread influxdb init`
and the project's own server, and as the InfluxQL an admin runs when we may not.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

from collector.influx.client import InfluxClient, InfluxError, quote_ident


class RetentionPolicy(NamedTuple):
    """A retention policy of the metrics database."""
    name: str
    duration: str
    shard_duration: str
    default: bool
    holds: str


RP_RAW = "raw"
RP_ROLLUP = "rollup"
RETENTION_POLICIES = (
    RetentionPolicy(RP_RAW, "7d", "1d", True, "1-second points written live (the default policy)"),
    RetentionPolicy(RP_ROLLUP, "90d", "7d", False, "10 s .. 1 h latency rollups (Point.rp='rollup')"),
)


def setup_statements(db: str, policies: Sequence[RetentionPolicy] = RETENTION_POLICIES) -> list[str]:
    """Return the InfluxQL an admin runs to create `db` with the project's retention policies."""
    return [f"CREATE DATABASE {quote_ident(db)}"] + [
        f"CREATE RETENTION POLICY {quote_ident(rp.name)} ON {quote_ident(db)} DURATION {rp.duration} "
        f"REPLICATION 1 SHARD DURATION {rp.shard_duration}{' DEFAULT' if rp.default else ''}"
        for rp in policies]


def describe_policies(policies: Sequence[RetentionPolicy] = RETENTION_POLICIES) -> str:
    """Return e.g. "raw (7d, default), rollup (90d)" for a message to the user."""
    return ", ".join(f"{p.name} ({p.duration}{', default' if p.default else ''})" for p in policies)


def ensure_policy(client: InfluxClient, name: str, default: bool = False) -> bool:
    """Create the project's retention policy `name` if it is one; return whether."""
    for rp in RETENTION_POLICIES:
        if rp.name == name:
            client.create_retention_policy(rp.name, rp.duration, shard_duration=rp.shard_duration, default=default)
            return True
    return False


def ensure_database(client: InfluxClient, policies: Sequence[RetentionPolicy] = RETENTION_POLICIES) -> None:
    """Create the client's database and its retention policies, or bring them to `policies` (InfluxDB 1.x)."""
    client.create_database()
    for rp in policies:
        kw = dict(shard_duration=rp.shard_duration, default=rp.default)
        try:
            client.create_retention_policy(rp.name, rp.duration, **kw)
        except InfluxError as e:
            if "already exists" not in str(e):
                raise
            client.create_retention_policy(rp.name, rp.duration, alter=True, **kw)
