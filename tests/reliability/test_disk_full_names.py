"""The job's disk-full line names the file system that is full, not the state folder's."""
from __future__ import annotations

import pytest

from engine.tools.generate import generate
from tests.tmpfs import fill, mounted_tmpfs

from .harness import fleet_for, log_tail, send_outcome, start_ingress, stop_gracefully


@pytest.mark.slow
def test_a_full_checkpoint_mount_under_the_state_folder_is_the_one_named(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=50, nbbo=5_000, orders=5_000, wide_share=0.1, seed=3)
    fleet = fleet_for(tmp_path)
    state = tmp_path / "state"
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics")
        for s, f in (("nbbo", nbbo), ("orders", orders)):
            assert send_outcome(ports[s], f.read_bytes()) == "acked"
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
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
