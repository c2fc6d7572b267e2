"""The shard count a checkpoint was made with, read back from its state's count file, else Spark's offset log."""
from __future__ import annotations

import json

import pytest

from engine.spark.checkpoint import SHARDS_FILE, recorded_shards, settle_shards
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


def test_a_restart_takes_the_checkpoints_count_unless_another_is_given_explicitly(tmp_path):
    cfg = Config.from_env(state_dir=tmp_path, shards=1)
    _offsets(cfg, 0, 2)
    _offsets(cfg, 1, 2, torn=True)                  # a crash mid-write: the entry before counts
    (cfg.checkpoint_dir / "offsets" / ".1.tmp").write_text("")
    assert recorded_shards(cfg.checkpoint_dir) == 2
    assert settle_shards(cfg, explicit=False).shards == 2
    assert settle_shards(cfg, explicit=True).shards == 1        # the job re-partitions to it (test_rescale.py)
    with pytest.raises(ValueError, match="between 1 and"):
        settle_shards(Config.from_env(state_dir=tmp_path, shards=0), explicit=True)


def test_the_state_folders_count_file_wins_over_the_offset_log(tmp_path):
    cfg = Config.from_env(state_dir=tmp_path, shards=1)
    _offsets(cfg, 0, 2)                             # Spark keeps the count it restored on restart
    cfg.shard_state_dir.mkdir(parents=True)
    (cfg.shard_state_dir / SHARDS_FILE).write_text("5\n")
    assert recorded_shards(cfg.checkpoint_dir) == 5
    assert settle_shards(cfg, explicit=False).shards == 5
