"""The shard count a checkpoint was made with, read back from Spark's offset log."""
from __future__ import annotations

import json

import pytest

from engine.spark.checkpoint import ShardMismatch, recorded_shards, settle_shards
from engine.config import Config


def _offsets(cfg: Config, batch: int, shards: int | None, torn: bool = False) -> None:
    d = cfg.checkpoint_dir / "offsets"
    d.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": str(shards)}}
    text = "v1\n" + json.dumps(meta) + '\n{"seq":10}'
    (d / str(batch)).write_text(text[:12] if torn else text)


def test_a_fresh_state_folder_takes_the_shards_asked_for(tmp_path):
    cfg = Config.from_env(state_dir=tmp_path, shards=3)
    assert recorded_shards(cfg.checkpoint_dir) is None
    assert settle_shards(cfg, explicit=True).shards == 3


def test_a_restart_takes_the_checkpoints_count_and_refuses_another_given_explicitly(tmp_path):
    cfg = Config.from_env(state_dir=tmp_path, shards=1)
    _offsets(cfg, 0, 2)
    _offsets(cfg, 1, 2, torn=True)                  # a crash mid-write: the entry before counts
    (cfg.checkpoint_dir / "offsets" / ".1.tmp").write_text("")
    assert recorded_shards(cfg.checkpoint_dir) == 2
    assert settle_shards(cfg, explicit=False).shards == 2
    with pytest.raises(ShardMismatch, match="made with --shards 2, not 1"):
        settle_shards(cfg, explicit=True)
    assert settle_shards(Config.from_env(state_dir=tmp_path, shards=2), explicit=True).shards == 2
