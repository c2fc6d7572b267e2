"""Where a benchmark writes its result: bench/out/ (ignored by git), or bench/results/ with `--record`.

bench/results/ holds the runs a document cites; a run worth citing is made with `--record`.

    add_record_flag(parser)
    path = write_result(doc, result_path("e2e-latency", args.record))
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "bench" / "out"
RESULTS_DIR = ROOT / "bench" / "results"


def add_record_flag(parser: argparse.ArgumentParser) -> None:
    """Add `--record`: write the result to bench/results/ instead of bench/out/."""
    parser.add_argument("--record", action="store_true",
                        help="write the result to bench/results/ (kept in git, cited by the docs) "
                             "instead of bench/out/")


def utc_stamp() -> str:
    """Return the time now as a file-name stamp, e.g. 20261128T174000Z."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def result_path(name: str, record: bool, stamped: bool = True) -> Path:
    """Return the file for a result named `name` (`<name>-<UTC>.json`, or `<name>.json` unstamped)."""
    folder = RESULTS_DIR if record else OUT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (f"{name}-{utc_stamp()}.json" if stamped else f"{name}.json")


def write_result(doc, path: Path, indent: int = 1, default=None) -> Path:
    """Write `doc` as JSON to `path` atomically; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=indent, default=default) + "\n")
    tmp.replace(path)
    return path


def shown(path: Path) -> str:
    """Return a result's path relative to the project root when it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
