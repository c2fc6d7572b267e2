"""The log pump is `collector.logpump` (it serves the project's InfluxDB and Alertmanager alike); kept for importers."""
from collector.logpump import LOG_BACKUPS, LOG_MAX_BYTES, MAX_LINE_BYTES, main, pump, spawn_logged

__all__ = ["LOG_BACKUPS", "LOG_MAX_BYTES", "MAX_LINE_BYTES", "main", "pump", "spawn_logged"]
