"""Where the driver JVM's install artefacts live, and the JDK tools that make them.

Shared by the class archive (jvm_archive.py) and the project's jar (jvm_jar.py): both are
made once by `marketspread jvm-archive` into the venv.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

ARCHIVE_DIR = Path(sys.prefix) / "var" / "marketspread"


def java_tool(name: str) -> str:
    """A JDK tool (`jcmd`, `javac`) next to the `java` Spark runs, else on PATH."""
    java = shutil.which("java")
    if java is not None:
        beside = Path(java).resolve().parent / name
        if beside.is_file():
            return str(beside)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: it needs a JDK (Debian: openjdk-17-jdk-headless)")
    return found
