"""`main(argv)` runs again and again in one process: what tests calling it in-process rely on."""
from __future__ import annotations

import logging
import signal

from ..cli_inprocess import run_main


def _process_state() -> tuple:
    root = logging.getLogger()
    return list(root.handlers), root.level, signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


def test_main_runs_twice_and_leaves_logging_and_signal_handlers_as_it_found_them(tmp_path):
    before = _process_state()
    for n in range(2):
        ran = run_main(["alerts", "--state-dir", tmp_path, "serve", "--interval", "0.2", "--duration", "0.3"],
                       env={"MS_INFLUX_URL": "http://127.0.0.1:9"})   # nothing listens: the evaluator says so
        assert ran.returncode == 0, ran.stderr
        assert ran.stderr.count("alerts: 0 rules") == 1, (n, ran.stderr)   # this call's log lines, once each
        assert _process_state() == before


def test_a_bad_flag_and_version_exit_as_argparse_does():
    bad = run_main(["job", "--shards", "many"], env={})
    assert bad.returncode == 2 and "--shards: invalid int value: 'many'" in bad.stderr
    assert run_main(["--version"]).stdout.startswith("marketspread ")
