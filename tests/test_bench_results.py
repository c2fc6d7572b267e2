"""bench/results/ holds only the runs the documents cite: few files, and every one cited exists.

A benchmark writes to bench/out/ (ignored by git) unless run with `--record`; a recorded
run stays in bench/results/ while README.md, docs/*.md or bench/README.md name it.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MAX_FILES = 33
CITED = re.compile(r"bench/results/[A-Za-z0-9_.\-]+")
# A result named alone, as tables do: `e2e-throughput-20261127T210939Z.json`, or a fixed name.
NAMED = re.compile(r"`([A-Za-z0-9_\-]+(?:-\d{8}T\d{4,6}Z)?\.json)`")
STAMPED = re.compile(r"-\d{8}T\d{4,6}Z\.json$")
UNSTAMPED = re.compile(r"result_path\(\"([\w\-]+)\",[^)]*stamped=False")


def documents() -> list[Path]:
    """Return the documents whose citations of bench/results/ must resolve."""
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fixed_names() -> set[str]:
    """Return the result files a benchmark writes under a fixed name (soak.json, ...)."""
    return {f"{m}.json" for p in (ROOT / "bench").glob("*.py") for m in UNSTAMPED.findall(p.read_text())}


def citations() -> dict[str, list[str]]:
    """Return each bench/results/ file the documents cite, with the documents citing it."""
    fixed = fixed_names()
    cited: dict[str, list[str]] = {}
    for doc in documents():
        if not doc.exists():
            continue
        text = doc.read_text(encoding="utf-8")
        names = [p.rstrip(".").rsplit("/", 1)[1] for p in CITED.findall(text)]
        names += [n for n in NAMED.findall(text) if STAMPED.search(n) or n in fixed]
        for name in names:
            if "." in name:                               # a file, not the folder or a pattern's stem
                cited.setdefault(name, []).append(str(doc.relative_to(ROOT)))
    return cited


def test_bench_results_keeps_few_files():
    files = [p for p in RESULTS.iterdir() if p.is_file()]
    assert len(files) <= MAX_FILES, f"{len(files)} files in bench/results/ (at most {MAX_FILES}: the cited runs)"


def test_every_cited_result_file_exists():
    missing = {name: docs for name, docs in citations().items() if not (RESULTS / name).is_file()}
    assert not missing, f"cited but not in bench/results/: {missing}"


def test_the_citation_patterns_find_result_files():
    text = ("see bench/results/e2e-latency-20261128T120000Z.json. and `peers-20261128T032053Z.json`, "
            "`soak.json`, not `stats.json` nor bench/results/e2e-<mode>-<UTC>.json")
    found = [p.rstrip(".").rsplit("/", 1)[1] for p in CITED.findall(text)]
    found += [n for n in NAMED.findall(text) if STAMPED.search(n) or n in fixed_names()]
    assert [n for n in found if "." in n] == ["e2e-latency-20261128T120000Z.json", "peers-20261128T032053Z.json",
                                              "soak.json"]


def test_no_test_imports_bench():
    """Benchmarks are commands; what a test exercises of theirs lives in perf/ (the product's perf package)."""
    imports = re.compile(r"^\s*(?:from\s+bench(?:\.|\s)|import\s+bench\b)", re.M)
    found = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").rglob("*.py")) if imports.search(p.read_text())]
    assert found == [], f"tests import bench/: {found}"
