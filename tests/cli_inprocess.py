"""Run a `marketspread` command in the test's own process: `main(argv)` with its output and exit code.

The command line is the same `main` the console script calls; only a test about the process
itself (signals, a server's exit, sockets, the installed command) needs an interpreter of its own.
"""
from __future__ import annotations

import io
import logging
import os
import subprocess
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from typing import Mapping

import pytest

from marketspread.cli import LOG_FORMAT, main


def run_main(argv: list, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Return what `marketspread <argv>` printed and its exit code, as a child process would.

    `env` given: the command sees exactly its `MS_*` variables (as a child given `env=`);
    the others of `env` (PATH, PYTHONPATH) mean nothing in-process. Restored afterwards.
    Its log lines are in its stderr, as a process's are (`main` leaves pytest's logging be).
    """
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(err), _logging_to(err, argv):
        if env is not None:
            for name in [k for k in os.environ if k.startswith("MS_") and k not in env]:
                mp.delenv(name)
            for name, value in env.items():
                if name.startswith("MS_"):
                    mp.setenv(name, value)
        try:
            code = main(argv)
        except SystemExit as e:                             # argparse: --help, --version, a bad flag
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return subprocess.CompletedProcess(["marketspread", *argv], code, out.getvalue(), err.getvalue())


@contextmanager
def _logging_to(stream: io.StringIO, argv: list[str]):
    """Log to `stream` at the command's level while it runs, as `main` does in a process of its own."""
    root = logging.getLogger()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if {"-v", "--verbose"} & set(argv) else logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
