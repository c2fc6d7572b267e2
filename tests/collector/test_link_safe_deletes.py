"""Links planted where the product deletes never lead a deletion outside the state folder.

Others may write the task-sample spool (a cluster's shared mount) and the metrics spool;
a link to a file or a folder outside, in any folder the product deletes from, is removed
as a link or skipped, and its target stays intact.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from collector import task_spool
from collector.influx.spool import Spool
from collector.safe_delete import LinkOnPath, remove_file_in, remove_in, remove_tree
from engine.formats.log import LogWriter, write_u64
from engine.formats.shard_files import delete_shard_segments, remove_shard_files


def _outside(tmp_path: Path) -> tuple[Path, Path]:
    """A folder and a file outside the state folder, each with content to lose."""
    folder = tmp_path / "outside"
    (folder / "0").mkdir(parents=True)
    (folder / "0" / "precious.s1").write_text("[]\n")
    (folder / "precious.txt").write_text("keep me")
    (folder / "0000000000000000.1.%40.lp").write_text("secret 1\n")
    lone = tmp_path / "lone.txt"
    lone.write_text("keep me too")
    return folder, lone


def _intact(folder: Path, lone: Path) -> None:
    assert (folder / "0" / "precious.s1").read_text() == "[]\n"
    assert (folder / "precious.txt").read_text() == "keep me"
    assert (folder / "0000000000000000.1.%40.lp").read_text() == "secret 1\n"
    assert lone.read_text() == "keep me too"


def _age(path: Path, seconds: float = 3600) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


def test_task_spool_sweep_and_collect_keep_link_targets(tmp_path):
    folder, lone = _outside(tmp_path)
    spool = tmp_path / "state" / "task-samples"
    (spool / "q-real" / "7").mkdir(parents=True)
    # a query folder that is a link, a batch folder that is a link, a file link, the
    # _unbatched folder a link, and a link inside a real batch folder
    (spool / "q-linked").symlink_to(folder)
    (spool / "q-real" / "0").symlink_to(folder)
    (spool / "q-real" / "file").symlink_to(lone)
    (spool / "q-real" / "7" / "x~0~0~0~0.s1").symlink_to(lone)
    (spool / task_spool.UNBATCHED).symlink_to(folder)
    for p in [*spool.rglob("*")]:
        _age(p)
    assert task_spool.collect_batch_figures(spool, "q-linked", 0).samples == ()
    task_spool.collect_batch_figures(spool, "q-real", 7)
    task_spool.collect_batch_figures(spool, "q-real", 0)
    task_spool.collect_unbatched(spool)
    task_spool.sweep(spool, older_than_s=1)
    _intact(folder, lone)


def test_metrics_spool_keeps_link_targets(tmp_path):
    folder, lone = _outside(tmp_path)
    path = tmp_path / "state" / "metrics-spool" / "w"
    path.mkdir(parents=True)
    (path / "0000000000000001.1.%40.lp").symlink_to(lone)
    (path / "0000000000000002.1.%40.lp.tmp").symlink_to(lone)
    (path / "0000000000000003.1.%40.lp").symlink_to(folder)
    s = Spool(path, max_bytes=1)
    s.open()
    s.append(b"m v=1 1\n" * 4, None)         # past the bound: the oldest are evicted
    while (claim := s.claim_oldest()) is not None:
        s.release(claim[0], done=True)
    s.close()
    linked = tmp_path / "state" / "metrics-spool" / "linked"
    linked.symlink_to(folder)
    s = Spool(linked, max_bytes=1)
    try:
        s.open()
        s.append(b"m v=1 1\n", None)
        while (claim := s.claim_oldest()) is not None:
            s.release(claim[0], done=True)
        s.close()
    except (OSError, RuntimeError):
        pass                                  # refusing a linked spool folder is fine too
    _intact(folder, lone)


def test_remove_tree_removes_links_as_links(tmp_path):
    folder, lone = _outside(tmp_path)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "to-folder").symlink_to(folder)
    (tree / "to-file").symlink_to(lone)
    remove_tree(tree)
    assert not tree.exists()
    _intact(folder, lone)


def test_remove_in_refuses_a_path_behind_a_linked_folder(tmp_path):
    folder, lone = _outside(tmp_path)
    root = tmp_path / "state"
    root.mkdir()
    (root / "sub").symlink_to(folder)
    with pytest.raises(LinkOnPath):
        remove_in(root, root / "sub" / "precious.txt")
    with pytest.raises(LinkOnPath):
        remove_file_in(root, root / "sub" / "0")
    assert remove_in(root, root / "sub") == 0 or not (root / "sub").exists()   # the link itself goes
    assert not (root / "sub").is_symlink()
    _intact(folder, lone)


def _segment_folder(folder: Path) -> None:
    """Files named as the ingress log's and shard files' segments, in a folder outside."""
    for first in (0, 100):
        (folder / f"seg-{first:020d}.log").write_text("keep me")


def _segments_intact(folder: Path) -> None:
    assert all((folder / f"seg-{first:020d}.log").read_text() == "keep me" for first in (0, 100))


def test_shard_files_removal_and_retention_keep_link_targets(tmp_path):
    folder, lone = _outside(tmp_path)
    _segment_folder(folder)
    log_dir = tmp_path / "state" / "ingress"
    log_dir.mkdir(parents=True)
    # a linked shards folder, a linked generation, a linked shard folder
    (log_dir / "shards-2").symlink_to(folder)
    gen = log_dir / "shards-3" / f"{1:020d}"
    gen.mkdir(parents=True)
    write_u64(gen / "span", 100)
    (gen / "0").symlink_to(folder)
    (log_dir / "shards-4").mkdir()
    (log_dir / "shards-4" / f"{2:020d}").symlink_to(folder)
    write_u64(folder / "span", 100)
    delete_shard_segments(log_dir, 10_000)
    _segments_intact(folder)
    remove_shard_files(log_dir)
    assert not any(log_dir.iterdir())
    _segments_intact(folder)
    _intact(folder, lone)


def test_log_rollback_removes_a_linked_segment_as_a_link(tmp_path):
    folder, lone = _outside(tmp_path)
    log_dir = tmp_path / "state" / "ingress"
    w = LogWriter(log_dir, segment_records=100, fsync=False)
    w.append(np.zeros((50, 56), np.uint8), 1)
    w.commit()
    (log_dir / f"seg-{100:020d}.log").symlink_to(lone)          # a segment past the head
    w.rollback()
    w.close()
    assert not (log_dir / f"seg-{100:020d}.log").exists()
    _intact(folder, lone)


def test_shard_state_sweep_and_save_never_delete_through_a_linked_shard_folder(tmp_path):
    from engine.rule import ShardState
    from engine.spark import shard_state
    folder, lone = _outside(tmp_path)
    for b in (1, 2, 3):
        (folder / f"{b}.state").write_text("keep me")
    state = tmp_path / "state" / "shard-state"
    state.mkdir(parents=True)
    (state / "5").symlink_to(folder)
    assert shard_state.sweep(str(state), 5, 100, 2) == 0
    (state / "6").mkdir()
    (state / "6" / "1.state").symlink_to(lone)                  # a snapshot that is a link
    assert shard_state.sweep(str(state), 6, 100, 2) == 1
    assert not (state / "6" / "1.state").is_symlink()
    shard_state._CACHE.pop((str(state), 5), None)
    shard_state.save(str(state), 5, 4, ShardState.empty(), 2)   # writes through the link; deletes nothing there
    shard_state.save(str(state), 5, 5, ShardState.empty(), 2)
    assert all((folder / f"{b}.state").read_text() == "keep me" for b in (1, 2, 3))
    _intact(folder, lone)


def test_dead_temp_folders_that_are_links_keep_their_targets(tmp_path):
    from engine.spark.session import remove_dead_temp
    folder, lone = _outside(tmp_path)
    (tmp_path / "tmp").mkdir()
    (tmp_path / "tmp" / "ms-999999-1-abc").symlink_to(folder)   # a dead pid's name, a link
    dead = tmp_path / "tmp" / "ms-999998-1-def"
    dead.mkdir()
    (dead / "escape").symlink_to(folder)                        # a link inside a dead folder
    removed = remove_dead_temp(tmp_path / "tmp", "ms-")
    assert removed == [dead] and not dead.exists()
    _intact(folder, lone)



def test_unfinished_checkpoint_writes_are_removed_without_following_links(tmp_path):
    from marketspread.runner import remove_unfinished_checkpoint_writes
    folder, lone = _outside(tmp_path)
    temp = ".1.6b1e0f46-3d3c-4a3e-9d7e-0c9f2f0a1b2c.tmp"
    (folder / temp).write_text("keep me")
    checkpoint = tmp_path / "state" / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "state").symlink_to(folder)                   # a linked folder inside the checkpoint
    (checkpoint / "offsets" / temp).symlink_to(lone)             # a temp file that is a link
    removed = remove_unfinished_checkpoint_writes(checkpoint)
    assert removed == [checkpoint / "offsets" / temp] and not (checkpoint / "offsets" / temp).is_symlink()
    assert (folder / temp).read_text() == "keep me"
    _intact(folder, lone)

PRODUCT = ("engine", "collector", "spark_listener", "metrics_ui", "alerts", "marketspread", "perf")
_DELETES = re.compile(r"shutil\.rmtree|\.unlink\(|os\.remove\(|os\.unlink\(")


def test_every_delete_of_the_product_goes_through_the_link_safe_path():
    root = Path(__file__).parents[2]
    found = [f"{p.relative_to(root)}:{n}: {line.strip()}"
             for pkg in PRODUCT for p in sorted((root / pkg).rglob("*.py")) if p.name != "safe_delete.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if _DELETES.search(line)]
    assert found == [], "delete through collector/safe_delete.py (remove_in, remove_file_in, remove_tree):\n" \
        + "\n".join(found)
