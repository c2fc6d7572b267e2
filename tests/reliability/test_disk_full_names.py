"""The job's disk-full line names the file system that is full, not the state folder's."""
from __future__ import annotations

import pytest

from tests.tmpfs import fill, mounted_tmpfs

from .harness import ingested_fleet, log_tail


@pytest.mark.slow
def test_a_full_checkpoint_mount_under_the_state_folder_is_the_one_named(tmp_path):
    fleet, state = ingested_fleet(tmp_path, seed=3)
    try:
        with mounted_tmpfs(state / "checkpoint", 1) as checkpoint:     # the full one, under a roomy state folder
            fill(checkpoint / "ballast")
            job = fleet.spawn("job", ["job", "--state-dir", state, "--master", "local[1]", "--no-metrics"])
            job.popen.wait(timeout=300)
            last = job.log_path.read_text(errors="replace").strip().splitlines()[-1]
    finally:
        fleet.stop_all()
    assert job.popen.returncode == 2, log_tail(job.log_path)
    assert last.startswith("marketspread job: error: disk full: 0 bytes free in "), last
    assert f"free in {state / 'checkpoint'}" in last, last
