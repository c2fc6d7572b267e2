"""The product's version: the installed package's, else the source tree's pyproject.toml."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "marketspread"
_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def version(pyproject: Path = _PYPROJECT) -> str:
    """Return the version of the installed `marketspread`, else the one `pyproject` names.

    A checkout run without installing it (`PYTHONPATH=. python -m marketspread`) has no
    package metadata; its pyproject.toml is then the source of truth. "unknown" if neither.
    """
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return pyproject_version(pyproject) or "unknown"


def pyproject_version(pyproject: Path) -> str | None:
    """Return `[project] version` of a pyproject.toml, None when it has none or is missing."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    found = project and re.search(r'^version\s*=\s*["\']([^"\']+)["\']', project.group(1), re.MULTILINE)
    return found.group(1) if found else None
