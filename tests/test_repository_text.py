"""The repository's text speaks of the product, and the README's figures are backed by data.

- No work diary in tracked text files: a session or sitting named by its number ("session N",
  "Issue N, session M"), "(2026-11-27 re-run)". Spark sessions, login sessions and session cookies are not diary
  (a Spark session followed by its start-up time is a figure). bench/results/ holds data, not text,
  binary files are skipped, and so is this file, whose examples are the patterns.
- Every figure of the README's Performance table is in the `bench/results/` file its row
  names, and that file is the newest of its benchmark.
- Relative links of the README and docs/ resolve, anchors included.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"

TEXT_SUFFIXES = {".md", ".py", ".txt", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".java", ".js",
                 ".css", ".sh", ".pth"}
SCRIPT_DIRS = ("scripts/", ".ci/")

_NOT_DIARY = r"(?<!spark )(?<!login )(?<!browser )(?<!user )"
DIARY = [
    re.compile(_NOT_DIARY + r"\bsessions?[ -]\d+", re.IGNORECASE),
    re.compile(r"\bsittings? \d", re.IGNORECASE),
    re.compile(r"\bissue \d+, session", re.IGNORECASE),
    re.compile(r"\(\d{4}-\d{2}-\d{2},? re-?(run|measured?)\)", re.IGNORECASE),
    re.compile(r"\bre-?(ran|run|measured) (on|in) \d{4}-\d{2}-\d{2}", re.IGNORECASE),
]


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in out.decode().split("\0"):
        if not name or name.startswith("bench/results/") or ROOT / name == Path(__file__).resolve():
            continue
        if Path(name).suffix in TEXT_SUFFIXES or name.startswith(SCRIPT_DIRS):
            files.append(ROOT / name)
    return files


def _groups() -> dict[str, list[Path]]:
    """Tracked text files by top-level folder (a file at the top is its own group)."""
    groups: dict[str, list[Path]] = {}
    for f in _tracked_text_files():
        top = f.relative_to(ROOT).parts[0]
        groups.setdefault(top, []).append(f)
    return groups


def diary_lines(path: Path) -> list[str]:
    """Return `path:line: text` for each line with a diary word (none for a binary file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, FileNotFoundError):
        return []
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        if any(p.search(line) for p in DIARY):
            hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    return hits


def test_the_diary_patterns_tell_diary_from_spark_sessions():
    # the numbers go in at run time, so that this file holds no diary line itself
    diary = [t.format(*range(2, 9)) for t in (
        "measured in session {}", "Issue {}, session {}: six sittings", "two sittings {} and {}",
        "sessions {}-{} pooled", "p99 (2026-11-27 re-run)", "Session {} gave", "since the session-{} run")]
    product = [t.format(2) for t in (
        "the Spark session {}.67 → 2.28 s", "one local Spark session per test session", "a login session {} h long",
        "SparkSession.builder", "a session cookie", "each in a session of its own", "sitting_file(path)")]
    assert all(any(p.search(t) for p in DIARY) for t in diary)
    assert not any(p.search(t) for p in DIARY for t in product)


@pytest.mark.parametrize("group", sorted(_groups()))
def test_no_work_diary_in_tracked_text(group):
    hits = [h for f in _groups()[group] for h in diary_lines(f)]
    assert not hits, "diary words (say what is true now; history is git log and CHANGELOG.md):\n" + "\n".join(hits)


# --- the README's Performance table -------------------------------------------------------------

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_STAMPED = re.compile(r"^(?P<bench>.+?)-(?P<utc>\d{8}T[\dZ]+)\.json$")


def performance_rows(text: str) -> list[dict[str, str]]:
    """Return the rows of the first table under the README's `## Performance`, by header."""
    section = text.split("\n## Performance\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")))) for ln in lines[2:]]


def json_numbers(value) -> list[float]:
    """Every number in a JSON document (booleans left out)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in json_numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in json_numbers(v)]
    return []


def holds(numbers: list[float], shown: str) -> bool:
    """True when a number in the file rounds to `shown` as printed.

    The tolerance is half a unit of the last digit shown (`5.35` matches 5.345-5.355,
    `3,129,834` matches within 0.5), and the file's number may be in a unit 1000^k of the
    shown one (k from -3 to 3: s and ms, bytes per event and bytes per million events).
    """
    value = float(shown.replace(",", ""))
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    tol = 0.5 * 10 ** -decimals * (1 + 1e-9) + 1e-12
    return any(abs(x * 1000.0 ** k - value) <= tol for x in numbers for k in range(-3, 4))


def test_the_readme_has_a_performance_table_of_figures_and_files():
    rows = performance_rows(README.read_text())
    assert len(rows) >= 5
    for row in rows:
        assert _BOLD.search(row["current"]), row
        assert re.search(r"`[^`]+\.json`", row["file"]), row


@pytest.mark.parametrize("row", performance_rows(README.read_text()), ids=lambda r: r["figure"][:40])
def test_each_readme_figure_is_in_the_result_file_its_row_names(row):
    names = re.findall(r"`([^`]+\.json)`", row["file"])
    for name in names:
        assert (RESULTS / name).is_file(), f"{name} is not in bench/results/"
    numbers = [x for name in names for x in json_numbers(json.loads((RESULTS / name).read_text()))]
    for bold in _BOLD.findall(row["current"]):
        for shown in _NUMBER.findall(bold):
            assert holds(numbers, shown), f"{row['figure']}: {shown} is not in {', '.join(names)}"


@pytest.mark.parametrize("row", performance_rows(README.read_text()), ids=lambda r: r["figure"][:40])
def test_each_readme_figure_cites_its_benchmarks_latest_file(row):
    """A row may cite several sittings of a benchmark, its latest among them."""
    cited = re.findall(r"`([^`]+\.json)`", row["file"])
    for name in cited:
        m = _STAMPED.match(name)
        if not m:
            continue
        newer = sorted(p.name for p in RESULTS.glob(f"{m['bench']}-*.json")
                       if (s := _STAMPED.match(p.name)) and s["bench"] == m["bench"] and s["utc"] > m["utc"]
                       and p.name not in cited)
        assert not newer, f"{name}: bench/results/ has newer runs of that benchmark: {newer}"


def test_the_holding_rule():
    assert holds([5.346178], "5.35") and holds([3129833.93], "3,129,834") and holds([3917367.0], "3.9")
    assert holds([1.0195], "1.020") and holds([64000000], "64")
    assert not holds([5.36], "5.35") and not holds([1.03], "1.013")


def test_the_readme_stays_a_front_page():
    assert len(README.read_text().splitlines()) <= 300


def test_the_benchmarks_readme_says_how_to_run_each_in_under_300_lines():
    assert len((ROOT / "bench" / "README.md").read_text().splitlines()) <= 300


# --- links ---------------------------------------------------------------------------------------

_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(md: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file."""
    out = set()
    for line in md.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            out.add(slug)
    return out


@pytest.mark.parametrize("doc", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])
def test_relative_links_resolve(doc):
    path = ROOT / doc
    broken = []
    for target in _LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{doc}: links that do not resolve: {broken}"
