"""Links planted where the product deletes never lead a deletion outside the state folder.

Others may write the task-sample spool (a cluster's shared mount) and the metrics spool;
a link to a file or a folder outside, in any folder the product deletes from, is removed
as a link or skipped, and its target stays intact.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from collector import task_spool
from collector.influx.spool import Spool
from collector.safe_delete import remove_tree


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
