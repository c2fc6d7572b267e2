"""One typed configuration, from flags and `MS_`-prefixed environment variables."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from collector.settings import default_state_dir, env_values


SHARD_STATE = "shard-state"               # the shards' symbol tables, inside the checkpoint folder
MAX_SHARDS = 1024                         # a task, a state folder and a shard file each


@dataclass(frozen=True)
class Config:
    """Settings of ingress, job and sink; safe single-machine defaults.

    Every field can be set from the environment as `MS_<FIELD>` (e.g. `MS_MASTER`,
    `MS_SHARDS`) and from the command line; the command line wins.
    """
    state_dir: Path = Path(".state")
    host: str = "127.0.0.1"
    nbbo_port: int = 7001
    orders_port: int = 7002
    max_backlog: int = 2_000_000          # records not yet committed by the job before ingress mutes
    resume_backlog: int = 1_000_000       # ... and when it listens again
    fsync: bool = True
    master: str = "local[*]"
    # symbol shards = tasks of the stateful stage; a restart with another count re-partitions the
    # checkpoint's symbol tables (engine/spark/rescale.py). One measured best
    # on a 2-core machine (docs/PERFORMANCE.md, "Design decisions": "One shard by default");
    # on a cluster, one per executor core for the job.
    shards: int = 1
    max_rows_per_batch: int = 500_000
    # the first batch after each query start runs in a JVM and worker not yet warm: a smaller
    # one gives the first results sooner (docs/PERFORMANCE.md, "Design decisions": "500,000
    # records per batch at most, 100,000 in the first")
    first_batch_rows: int = 100_000
    trigger_ms: int = 0
    spark_ui: bool = False
    metrics: bool = True                  # latency samples recorded in tasks, shipped to InfluxDB
    # Count the bytes of records the tasks read (a Spark accumulator; the job logs bytes/event at
    # stop). Off by default: Spark hands each task's update to the driver's Python process and
    # waits for its answer before the batch ends, ~2 ms a batch with metrics on
    # (docs/PERFORMANCE.md, "Design decisions": "Bytes-read counting is opt-in").
    count_bytes_read: bool = False
    # ingress limits (docs/RELIABILITY.md, "Disk full" and "Connection flood"): the low-space mark is
    # the smaller of the two (5 % of a 20 TB disk is too much, 1 GiB of a 10 GiB one too little)
    max_connections: int = 1024           # per port; beyond it new connections are refused (RST)
    idle_timeout: int = 300               # seconds a connection may send nothing (muted time not counted)
    max_connections_per_client: int = 64  # per port and client address (IPv6: per /64); 0: no share
    first_frame_timeout: int = 10         # seconds a connection may take to send its first whole frame
    min_free_bytes: int = 1 << 30         # ingress mutes below this much free space in the state folder ...
    min_free_percent: int = 5             # ... or below this share of it, whichever is smaller
    deadletter_max_bytes: int = 64 << 20  # dead-letter file and its one rotated copy together
    # Disk retention (engine/storage/retention.py; docs/OPERATIONS.md "Retention and disk"). Log segments go once
    # the checkpoint no longer needs them; result batches by age and/or total size (Kafka's
    # retention.ms / retention.bytes); "0" turns a bound off.
    log_retention: bool = True            # False (--keep-log): keep every ingress log segment
    results_retention: str = "24h"        # delete committed result batches older than this
    results_retention_bytes: str = "10GiB"  # ... and the oldest beyond this total
    checkpoint_batches: int = 100         # spark.sql.streaming.minBatchesToRetain (Spark's default)
    process_log_bytes: int = 10 << 20     # demo process logs rotate at this size, 3 old files kept

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "ingress"

    @property
    def out_dir(self) -> Path:
        return self.state_dir / "results"

    @property
    def checkpoint_dir(self) -> Path:
        return self.state_dir / "checkpoint"

    @property
    def shard_state_dir(self) -> Path:
        """Each shard's state snapshots (engine/spark/shard_state.py), with the checkpoint."""
        return self.checkpoint_dir / SHARD_STATE

    @property
    def deadletter_path(self) -> Path:
        return self.state_dir / "ingress" / "deadletter.jsonl"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides) -> "Config":
        """Build from defaults, then `MS_*` variables (None: this process's), then non-None overrides."""
        cfg = cls(**{"state_dir": default_state_dir(environ), **env_values(cls, environ)})
        given = {k: v for k, v in overrides.items() if v is not None}
        if "state_dir" in given:
            given["state_dir"] = Path(given["state_dir"])
        return replace(cfg, **given)
