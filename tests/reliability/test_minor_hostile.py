"""Minor findings of the hostile round: duplicate keys in a rules file, a snapshot temp file left by a
failed write, and the demo's results bound."""
from __future__ import annotations

import numpy as np
import pytest

from alerts.store import read_rules_file
from engine.config import Config
from engine.rule import ShardState
from engine.spark import shard_state
from marketspread.demo import DEMO_RESULTS_BYTES, demo_retention
from tests.tmpfs import fill, mounted_tmpfs


@pytest.mark.parametrize("text", [
    "- name: a\n  condition: p99 > 5ms\n  condition: p99 > 500ms\n",
    '[{"name": "a", "condition": "p99 > 5ms", "name": "b"}]',
])
def test_a_rules_file_with_a_duplicate_key_is_refused_naming_the_key_and_line(tmp_path, text):
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=r"duplicate key '(condition|name)' at line \d"):
        read_rules_file(path)


def test_a_snapshot_write_that_fails_on_a_full_disk_leaves_no_temp_file(tmp_path):
    with mounted_tmpfs(tmp_path / "disk", 1) as disk:
        folder = disk / "shard-state"
        (folder / "0").mkdir(parents=True)
        fill(disk / "ballast")
        with pytest.raises(OSError):
            for batch in range(1, 200):            # whatever fits in the last blocks, then ENOSPC
                shard_state.save(str(folder), 0, batch, _sized(batch * 1000), retain=1000)
        left = [p.name for p in (folder / "0").iterdir() if p.name.endswith(".tmp")]
    assert left == []


def _sized(n: int) -> ShardState:
    """A state of `n` symbols (its file grows with them)."""
    return ShardState(np.arange(n, dtype=np.int32), np.zeros(n, bool), np.ones(n), np.full(n, 2.0))


def test_the_demo_bounds_its_results_lower_than_the_jobs_default_unless_told():
    assert demo_retention(Config()) == ("24h", DEMO_RESULTS_BYTES)
    assert demo_retention(Config(results_retention_bytes="50GiB")) == ("24h", "50GiB")
