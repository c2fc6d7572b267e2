"""Run a `marketspread` command in the test's own process: `main(argv)` with its output and exit code.

The command line is the same `main` the console script calls; only a test about the process
itself (signals, a server's exit, sockets, the installed command) needs an interpreter of its own.
"""
from __future__ import annotations

import io
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from typing import Mapping

import pytest

from marketspread.cli import main


def run_main(argv: list, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Return what `marketspread <argv>` printed and its exit code, as a child process would.

    `env` given: the command sees exactly its `MS_*` variables (as a child given `env=`);
    the others of `env` (PATH, PYTHONPATH) mean nothing in-process. Restored afterwards.
    """
    argv = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, redirect_stdout(out), redirect_stderr(err):
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
