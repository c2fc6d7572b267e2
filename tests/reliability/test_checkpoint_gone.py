"""A job whose checkpoint was deleted after retention removed old segments stops with one clear line."""
from __future__ import annotations

import shutil

import pytest

from engine.formats.log import read_consumed

from ..cli_inprocess import run_main
from .harness import drain, ingested_fleet, log_tail, start_job, stop_gracefully


@pytest.mark.slow
def test_a_job_on_a_used_state_folder_without_its_checkpoint_names_the_choices_in_one_line(tmp_path):
    fleet, state = ingested_fleet(tmp_path, seed=13)
    try:
        job = start_job(fleet, state, "--no-metrics", name="job-0")
        head = drain(state, job)
        assert stop_gracefully(fleet, job) == 0, log_tail(job.log_path)
        shutil.rmtree(state / "checkpoint")                  # deleted by hand, or lost with its disk
        (state / "ingress" / "seg-00000000000000000000.log").unlink()   # as retention deletes a segment
        again = run_main(["job", "--state-dir", state, "--master", "local[1]", "--no-metrics"])
    finally:
        fleet.stop_all()
    lines = [ln for ln in again.stderr.splitlines() if ln.strip()]
    assert again.returncode == 2, again.stderr[-3000:]
    assert len(lines) <= 5 and "Traceback" not in again.stderr, lines
    assert lines[-1].startswith("marketspread job: error: the checkpoint"), lines[-1]
    assert f"committed {head:,} records" in lines[-1] and "restore" in lines[-1] and "--state-dir" in lines[-1]
    assert read_consumed(state / "ingress") == head        # nothing was touched
    assert not (state / "checkpoint" / "offsets").exists()
