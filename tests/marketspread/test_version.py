"""`marketspread --version`: the installed package's version, else the source tree's pyproject.toml."""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from marketspread import version as version_mod
from marketspread.cli import main
from marketspread.version import pyproject_version, version

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_flag_prints_the_products_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"marketspread {pyproject_version(ROOT / 'pyproject.toml')}\n"


def test_the_version_is_pyproject_toml_s():
    assert pyproject_version(ROOT / "pyproject.toml") == "0.1.0" == version()


def test_a_source_tree_without_install_reads_pyproject_toml(monkeypatch, tmp_path):
    def not_installed(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(version_mod.metadata, "version", not_installed)
    (tmp_path / "pyproject.toml").write_text('[tool.other]\nversion = "9.9"\n\n[project]\nname = "marketspread"\n'
                                             'version = "1.2.3"\n\n[project.scripts]\nx = "y"\n')
    assert version(tmp_path / "pyproject.toml") == "1.2.3"
    assert version(tmp_path / "missing.toml") == "unknown"


def test_the_installed_command_runs():
    """The console script `pip install` made: the one test of the installed `marketspread` command
    (every other command-line test calls `main` in-process)."""
    command = Path(sys.executable).parent / "marketspread"
    out = subprocess.run([str(command), "--version"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stdout.strip() == "marketspread 0.1.0", out.stderr
