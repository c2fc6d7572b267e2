"""`marketspread job` flags whose defaults keep the driver's Python off each batch's path."""
from __future__ import annotations

from marketspread.cli import build_parser, config_from


def test_the_job_counts_the_bytes_its_tasks_read_only_when_asked(monkeypatch):
    """A Python accumulator's update is unpickled per task by the driver's Python (docs/PERFORMANCE.md,
    "Design decisions": bytes-read counting is opt-in)."""
    monkeypatch.delenv("MS_COUNT_BYTES_READ", raising=False)
    assert config_from(build_parser().parse_args(["job"])).count_bytes_read is False
    assert config_from(build_parser().parse_args(["job", "--count-bytes-read"])).count_bytes_read is True
    monkeypatch.setenv("MS_COUNT_BYTES_READ", "1")
    assert config_from(build_parser().parse_args(["job"])).count_bytes_read is True
