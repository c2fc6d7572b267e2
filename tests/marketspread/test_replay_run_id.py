"""`replay --run-id` names a folder inside the state folder, never a path: hostile ids are refused.

The command runs through the command line's `main`, in-process; a refused id must leave every
folder as it was (before the fix, `--run-id /some/dir` removed that folder and `--run-id ..` the
state folder itself).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..cli_inprocess import run_main


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>" for p in folder.rglob("*")}


@pytest.fixture
def layout(tmp_path):
    """A state folder with a kept replay, and a victim folder beside it, both with files in them."""
    state, victim = tmp_path / "state", tmp_path / "victim"
    (state / "replays" / "kept").mkdir(parents=True)
    (state / "replays" / "kept" / "results.bin").write_bytes(b"kept replay")
    (state / "ingress").mkdir()
    (state / "ingress" / "seg-0.log").write_bytes(b"live log")
    victim.mkdir()
    (victim / "precious.txt").write_text("do not delete")
    nbbo, orders = tmp_path / "nbbo.msg", tmp_path / "orders.msg"
    nbbo.write_bytes(b"")
    orders.write_bytes(b"")
    return tmp_path


def _replay(root: Path, run_id: str) -> subprocess.CompletedProcess:
    return run_main(["replay", "--state-dir", root / "state", "--nbbo", root / "nbbo.msg", "--orders",
                     root / "orders.msg", "--out", root / "out.msg", "--run-id", run_id, "--no-metrics"], env={})


@pytest.mark.parametrize("run_id, reason", [
    ("../victim", "contains a path separator"),
    ("..", "contains '..'"),
    ("../../victim", "contains a path separator"),
    ("VICTIM_ABS", "contains a path separator"),                 # replaced by the victim's absolute path
    ("kept", "exists already"),                                  # a kept replay is not wiped either
    ("run\n", "control character"),
    ("", "non-empty"),
    ("_x", "must start with a letter or digit"),
])
def test_hostile_run_ids_are_refused_and_nothing_is_touched(layout, run_id, reason):
    if run_id == "VICTIM_ABS":
        run_id = str(layout / "victim")
    before = _tree(layout)
    done = _replay(layout, run_id)
    assert done.returncode == 2, done.stderr[-2000:]
    err = done.stderr.strip().splitlines()
    assert err and err[-1].startswith("marketspread replay: error: ") and reason in err[-1], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert _tree(layout) == before                               # state, kept replay and victim as they were
