"""The ingress' metrics of a run shorter than one tick still carry its muted share."""
from __future__ import annotations

from types import SimpleNamespace

from collector.backpressure import BACKPRESSURE
from collector.testing import MemoryWriter
from marketspread.metrics_wiring import IngressMetrics


def _stats(muted_seconds: float = 0.0, backlog: int = 0):
    return SimpleNamespace(muted_seconds=muted_seconds, backlog=backlog, bad_reasons={}, accepted_total=10,
                           bad_total=0, head=10, consumed=10, muted=False, mute_episodes=0)


def test_a_run_shorter_than_a_tick_reports_its_muted_share():
    """Started and stopped within a second (a small replay): the share spans start to stop."""
    writer = MemoryWriter()
    metrics = IngressMetrics("short", writer, _stats).start()
    metrics.stop()
    [bp] = writer.measurement(BACKPRESSURE)
    assert bp.tags == {"run": "short", "step": "ingress"}
    assert bp.fields["backpressured_share"] == 0.0 and bp.fields["status"] == "OK"
