"""One vocabulary: measurement and step names come from `collector.vocabulary`, checked on the source with `ast`.

Writers, queries, the dashboard and the alert rules name a measurement through the
vocabulary module, so no other product module spells one out:

- in a query (a string, or an f-string's text, holding `FROM "<measurement>"`, `FROM <measurement>`
  or `"<policy>"."<measurement>"`);
- as the measurement of a `Point(...)`;
- bound to a module-level name (`LATENCY = "latency"`: a second definition);
- anywhere, for the names that mean nothing else (`spark_progress`, `alert_events`, ..., and the
  steps `check_market_data` and `start-to-end`). Those
  that are also ordinary words of the product (`ingress` is a process and a folder, `runs` a
  URL parameter, `process`, `latency` and `backpressure` column or axis titles) are checked in
  the three places above only.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from collector import vocabulary
from collector.influx import Point
from collector.vocabulary import MEASUREMENTS, STEP_CHECK, STEP_E2E

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("collector", "engine", "spark_listener", "alerts", "metrics_ui", "marketspread", "perf")
HOME = "collector/vocabulary.py"
#: Measurement names that are also plain words of the product, checked in schema places only.
WORDS = {"ingress", "runs", "process", "latency", "backpressure"}
#: Text that names measurements for a reader, not for InfluxDB: messages and help.
ALLOWED: dict[str, str] = {}
_FROM = re.compile(r'\bFROM\s+(?:"[^"]*"\.)?"?([A-Za-z_][A-Za-z0-9_]*)"?', re.IGNORECASE)


def _strings(node: ast.AST) -> list[str]:
    """Return the literal text of a string constant or of an f-string's constant parts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else "\0" for v in node.values)]
    return []


def spelled_out(source: str, filename: str = "<src>") -> list[tuple[int, str, str]]:
    """Return (line, measurement, where) for each measurement name the source spells out."""
    tree = ast.parse(source, filename)
    names = set(MEASUREMENTS)
    plain = names - WORDS | {STEP_CHECK, STEP_E2E}      # checked wherever they are spelled out
    found: list[tuple[int, str, str]] = []
    inside_fstring = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if id(node) in inside_fstring:
            continue
        for text in _strings(node):
            for m in _FROM.finditer(text):
                if m.group(1) in names:
                    found.append((node.lineno, m.group(1), "in a query"))
            if text in plain:
                found.append((node.lineno, text, "as a string"))
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and \
                (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "Point":
            first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "measurement"), None)
            if isinstance(first, ast.Constant) and first.value in WORDS:
                found.append((node.lineno, first.value, "as a Point's measurement"))
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant) \
                and node.value.value in WORDS:
            found.append((node.lineno, node.value.value, "bound to a module name"))
    return sorted(set(found))


def test_measurement_and_step_names_come_from_the_vocabulary():
    problems = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == HOME or rel in ALLOWED:
                continue
            problems += [f"{rel}:{line}: {name!r} {where}; import it from collector.vocabulary"
                         for line, name, where in spelled_out(path.read_text(), rel)]
    assert not problems, f"{len(problems)} measurement or step names spelled out:\n  " + "\n  ".join(problems)


def test_the_scan_sees_each_kind_of_spelling():
    src = ("from collector.vocabulary import LATENCY\n"
           "LATENCY = 'latency'\n"
           "q = f'SELECT * FROM \"spark_state\" WHERE x = {y}'\n"
           "r = 'SELECT x FROM \"rollup\".\"latency\"'\n"
           "p = Point('ingress', {}, {}, 0)\n"
           "k = {'level': 'alert_events'}\n"
           "s = 'start-to-end'\n"
           "ok = (f'SELECT * FROM \"{LATENCY}\"', 'ingress', Point(LATENCY, {}, {}, 0), 'spark_progress_x')\n")
    assert [(line, name) for line, name, _ in spelled_out(src)] == [
        (2, "latency"), (3, "spark_state"), (4, "latency"), (5, "ingress"), (6, "alert_events"), (7, "start-to-end")]


def test_the_vocabulary_lists_every_measurement_once():
    constants = {v for k, v in vars(vocabulary).items() if k.isupper() and isinstance(v, str)
                 and not k.startswith(("TAG_", "FIELD_", "STEP_", "PIPELINE_", "PHASE_"))}
    assert constants == set(MEASUREMENTS) and len(MEASUREMENTS) == len(set(MEASUREMENTS))
    assert Point(vocabulary.LATENCY, {}, {"count": 1}, 0).measurement == "latency"
