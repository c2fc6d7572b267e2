"""One typed configuration, from flags and `MS_`-prefixed environment variables.

`Config` is the one declaration: each field's default, its `MS_<FIELD>` variable (read by
`collector.settings.env_values`) and its command-line flag with its help (`setting`, read by
`collector.settings.add_setting_flags`), so no flag, help text or default is typed twice.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from collector.settings import default_state_dir, env_values, setting


SHARD_STATE = "shard-state"               # the shards' symbol tables, inside the checkpoint folder
MAX_SHARDS = 1024                         # a task, a state folder and a shard file each

# Flag groups: which commands take a field's flag (marketspread/cli.py).
COMMON = "common"                         # every command that runs ingress or the job
RETENTION = "retention"                   # the commands that run the job for long: job, demo
JOB = "job"                               # `job` alone


@dataclass(frozen=True)
class Config:
    """Settings of ingress, job and sink; safe single-machine defaults.

    Every field can be set from the environment as `MS_<FIELD>` (e.g. `MS_MASTER`,
    `MS_SHARDS`) and from the command line; the command line wins.
    """
    state_dir: Path = setting(Path(".state"), "state folder: ingress log, checkpoint, results, metrics, alert rules")
    host: str = setting("127.0.0.1", "ingress bind address")
    nbbo_port: int = setting(7001, "NBBO ingress port")
    orders_port: int = setting(7002, "orders ingress port")
    max_backlog: int = setting(2_000_000, "records behind the job before ingress mutes its sockets")
    resume_backlog: int = setting(1_000_000, "... and below which it listens again (half --max-backlog when "
                                             "only that is given)")
    fsync: bool = setting(True, "ingress does not fsync (survives process crashes, not machine crashes)",
                          flag="--no-fsync")
    master: str = setting("local[*]", "Spark master URL (e.g. spark://host:7077)")
    # symbol shards = tasks of the stateful stage; a restart with another count re-partitions the
    # checkpoint's symbol tables (engine/spark/rescale.py). One measured best
    # on a 2-core machine (docs/PERFORMANCE.md, "Design decisions": "One shard by default");
    # on a cluster, one per executor core for the job.
    shards: int = setting(1, "symbol shards = tasks of the stateful stage (unset: the checkpoint's; "
                             "another count re-partitions the checkpoint's state)")
    max_rows_per_batch: int = setting(500_000, "largest micro-batch in records")
    # the first batch after each query start runs in a JVM and worker not yet warm: a smaller
    # one gives the first results sooner (docs/PERFORMANCE.md, "Design decisions": "500,000
    # records per batch at most, 100,000 in the first")
    first_batch_rows: int = setting(100_000, "largest first micro-batch after each start: results sooner "
                                             "while Spark warms")
    trigger_ms: int = setting(0, "micro-batch trigger interval in ms (0: as fast as possible)")
    spark_ui: bool = setting(False, "run Spark's web UI (without it the status store keeps 100 batches)")
    metrics: bool = setting(True, "record no latency metrics (on: recorded in tasks, written to MS_INFLUX_URL)",
                            flag="--no-metrics")
    # Count the bytes of records the tasks read (a Spark accumulator; the job logs bytes/event at
    # stop). Off by default: Spark hands each task's update to the driver's Python process and
    # waits for its answer before the batch ends, ~2 ms a batch with metrics on
    # (docs/PERFORMANCE.md, "Design decisions": "Bytes-read counting is opt-in").
    count_bytes_read: bool = setting(False, "count the bytes the tasks read and log bytes/event at stop (each "
                                            "task's update is unpickled by the driver's Python, which the "
                                            "metrics threads share)", group=JOB)
    # ingress limits (docs/RELIABILITY.md, "Disk full" and "Connection flood"): the low-space mark is
    # the smaller of the two (5 % of a 20 TB disk is too much, 1 GiB of a 10 GiB one too little)
    max_connections: int = setting(1024, "ingress connections per port; more are refused (RST)")
    idle_timeout: int = setting(300, "seconds before the ingress drops a silent connection (muted time not counted)")
    max_connections_per_client: int = setting(64, "ingress connections per port and client address "
                                                  "(IPv6: per /64); 0: no share")
    first_frame_timeout: int = setting(10, "seconds a connection may take to send its first whole frame")
    min_free_bytes: int = setting(1 << 30, "ingress mutes below this free space in the state folder ...")
    min_free_percent: int = setting(5, "... or below this share of it, whichever is smaller")
    deadletter_max_bytes: int = setting(64 << 20, "cap of the dead-letter file and its rotated copy together")
    # Disk retention (engine/storage/retention.py; docs/OPERATIONS.md "Retention and disk"). Log segments go once
    # the checkpoint no longer needs them; result batches by age and/or total size (Kafka's
    # retention.ms / retention.bytes); "0" turns a bound off.
    log_retention: bool = setting(True, "keep every ingress log segment (on: delete those the checkpoint "
                                        "no longer needs)", flag="--keep-log", group=RETENTION)
    results_retention: str = setting("24h", "delete committed result batches older than this (0: no age bound)",
                                     metavar="TIME", group=RETENTION)
    results_retention_bytes: str = setting("10GiB", "... and the oldest beyond this total (0: no size bound)",
                                           metavar="SIZE", group=RETENTION)
    checkpoint_batches: int = setting(100, "batches the checkpoint keeps (spark.sql.streaming.minBatchesToRetain)",
                                      group=RETENTION)
    process_log_bytes: int = setting(10 << 20, "demo process logs rotate at this size, 3 old files kept")

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
