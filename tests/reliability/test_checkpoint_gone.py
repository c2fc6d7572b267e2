"""A job whose checkpoint was deleted after retention removed old segments stops with one clear line."""
from __future__ import annotations

import shutil

import pytest

from engine.ingress.log import read_consumed
from engine.tools.generate import generate

from .harness import drain, fleet_for, log_tail, send_outcome, start_ingress, start_job, stop_gracefully


@pytest.mark.slow
def test_a_job_on_a_used_state_folder_without_its_checkpoint_names_the_choices_in_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    nbbo, orders = data / "nbbo.msg", data / "orders.msg"
    generate(nbbo, orders, symbols=50, nbbo=5_000, orders=5_000, wide_share=0.1, seed=13)
    fleet = fleet_for(tmp_path)
    state = tmp_path / "state"
    try:
        ingress, ports = start_ingress(fleet, state, "--no-metrics")
        for s, f in (("nbbo", nbbo), ("orders", orders)):
            assert send_outcome(ports[s], f.read_bytes()) == "acked"
        assert stop_gracefully(fleet, ingress, 30) == 0, log_tail(ingress.log_path)
        job = start_job(fleet, state, "--no-metrics", name="job-0")
        head = drain(state, job)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
        shutil.rmtree(state / "checkpoint")                  # deleted by hand, or lost with its disk
        (state / "ingress" / "seg-00000000000000000000.log").unlink()   # as retention deletes a segment
        again = fleet.spawn("job-1", ["job", "--state-dir", state, "--master", "local[1]", "--no-metrics"])
        again.popen.wait(timeout=300)
    finally:
        fleet.stop_all()
    lines = [ln for ln in again.log_path.read_text(errors="replace").splitlines() if ln.strip()]
    assert again.popen.returncode == 2, log_tail(again.log_path)
    assert len(lines) <= 5 and "Traceback" not in again.log_path.read_text(), lines
    assert lines[-1].startswith("marketspread job: error: the checkpoint"), lines[-1]
    assert f"committed {head:,} records" in lines[-1] and "restore" in lines[-1] and "--state-dir" in lines[-1]
    assert read_consumed(state / "ingress") == head        # nothing was touched
    assert not (state / "checkpoint" / "offsets").exists()
