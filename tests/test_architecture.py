"""The architecture, checked on the source with `ast` (docs/ARCHITECTURE.md).

Imports flow one way: `collector` imports nothing of the project; `engine` and `alerts`
import only `collector`; `spark_listener` `collector` and `alerts`; `metrics_ui` only
`collector` and `alerts`; `perf` everything below it, and `marketspread` everything (perf included: the
`bench` command), never the other way round. Inside `engine`, each part (sub-package or
top-level module) imports only parts of lower layers (ENGINE_LAYERS). Modules import
each other without a cycle; an import inside a function says why on its line (`# lazy: <why>`: start-up or
Spark executors kept cheap), so it never hides a cycle or an upward import; and a product
file stays under MAX_LINES. Reading the files, not importing them, keeps this under a second.
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# package -> the project packages it may import (besides itself)
ALLOWED = {
    "collector": set(),
    "engine": {"collector"},
    "spark_listener": {"collector", "alerts"},
    "alerts": {"collector"},
    "metrics_ui": {"collector", "alerts"},
    "marketspread": {"collector", "engine", "spark_listener", "alerts", "metrics_ui", "perf"},
    "perf": {"collector", "engine", "spark_listener", "alerts", "metrics_ui"},
}
# engine's parts, bottom layer first: a part imports only parts of the layers below its own,
# so no two parts import each other (docs/ARCHITECTURE.md, "Inside engine/").
ENGINE_LAYERS = (
    ("engine.config", "engine.wire", "engine.storage"),     # settings record, fixish frames, disk
    ("engine.formats", "engine.rule"),                      # one module per on-disk format; the rule
    ("engine.ingress", "engine.spark", "engine.output", "engine.tools"),   # processes' parts
)
MAX_LINES = 500
# Longer files that are one idea, each with the reason it stays whole.
ONE_IDEA = {
    "engine/ingress/server.py": "the ingress's event loop: one class whose methods share one selector, "
                                "its connections and counters; split, each half would reach into the other",
}
LAZY = re.compile(r"#\s*lazy:\s*\S")


@dataclass(frozen=True)
class Import:
    """One import statement of a product module: where it is, what it names, how it runs."""
    path: str                  # file, relative to the project root
    line: int
    module: str                # the importing module, e.g. "engine.spark.job"
    targets: tuple[str, ...]   # project modules it imports (none for a third-party import)
    in_function: bool          # runs when the function does, not at import time
    type_only: bool            # under `if TYPE_CHECKING:`, never runs
    lazy_comment: bool         # `# lazy: <why>` on one of its lines


def product_files() -> list[Path]:
    """Return every .py file of the product packages."""
    return sorted(p for pkg in ALLOWED for p in (ROOT / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    """Return the dotted module of a file ('collector/influx/__init__.py' -> 'collector.influx')."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> tuple[str, ...]:
    """Return the project modules an import statement loads (relative imports resolved)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        # `from pkg import sub` loads the submodule when there is one, else names in pkg
        names = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names]
    found = []
    for name in names:
        while name and not _is_module(name):     # `import a.b.c` of a name inside a.b -> a.b
            name = name.rpartition(".")[0]
        if name and name.split(".")[0] in ALLOWED and name not in found:
            found.append(name)
    return tuple(found)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
           (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports_of(path: Path, lines: list[str]) -> list[Import]:
    module, is_package = module_name(path), path.name == "__init__.py"
    rel = str(path.relative_to(ROOT))
    found: list[Import] = []

    def walk(nodes, in_function: bool, type_only: bool) -> None:
        for child in nodes:
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.ImportFrom) and child.module == "__future__":
                    continue
                text = lines[child.lineno - 1:child.end_lineno]
                found.append(Import(rel, child.lineno, module, _targets(child, module, is_package),
                                    in_function, type_only, any(LAZY.search(t) for t in text)))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(ast.iter_child_nodes(child), True, type_only)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                walk(child.body, in_function, True)
                walk(child.orelse, in_function, type_only)
            else:
                walk(ast.iter_child_nodes(child), in_function, type_only)

    walk([ast.parse("\n".join(lines), filename=rel)], False, False)
    return found


@functools.cache
def all_imports() -> tuple[Import, ...]:
    """Return the imports of every product module (parsed once per test session)."""
    out: list[Import] = []
    for path in product_files():
        out += _imports_of(path, path.read_text().splitlines())
    return tuple(out)


def _report(title: str, problems: list[str]) -> str:
    return f"{len(problems)} {title}:\n  " + "\n  ".join(problems)


def test_imports_follow_the_layer_rule():
    problems = []
    for imp in all_imports():
        package = imp.module.split(".")[0]
        for target in imp.targets:
            top = target.split(".")[0]
            if top != package and top not in ALLOWED[package]:
                problems.append(f"{imp.path}:{imp.line}: {package} imports {target} "
                                f"({package} may import only {', '.join(sorted(ALLOWED[package])) or 'nothing of the project'})")
    assert not problems, _report("upward imports", problems)


def engine_part(module: str) -> str | None:
    """Return the part of `engine` a module belongs to ('engine.formats.log' -> 'engine.formats')."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "engine" and len(parts) > 1 else None


def _engine_layer(part: str) -> int | None:
    return next((i for i, layer in enumerate(ENGINE_LAYERS) if part in layer), None)


def test_engine_parts_import_only_lower_layers():
    problems = []
    for imp in all_imports():
        part = engine_part(imp.module)
        if part is None:
            continue
        if _engine_layer(part) is None:
            problems.append(f"{imp.path}: {part} is in no layer of ENGINE_LAYERS (tests/test_architecture.py)")
            continue
        for target in imp.targets:
            other = engine_part(target)
            if other is None or other == part:
                continue
            if _engine_layer(other) is None or _engine_layer(other) >= _engine_layer(part):
                problems.append(f"{imp.path}:{imp.line}: {part} imports {target} "
                                f"({part} may import only parts of the layers below it)")
    assert not problems, _report("imports inside engine that do not go down", sorted(set(problems)))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Return one cycle per strongly connected component of more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:               # Tarjan; the graph is a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def test_no_import_cycles_between_modules():
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for imp in all_imports():
        if imp.in_function or imp.type_only:
            continue
        for target in imp.targets:
            if target != imp.module:
                graph.setdefault(imp.module, set()).add(target)
                where.setdefault((imp.module, target), f"{imp.path}:{imp.line}")
    problems = []
    for component in _cycles(graph):
        members = set(component)
        edges = [f"{where[(a, b)]}: {a} -> {b}" for a in component for b in sorted(graph.get(a, ())) if b in members]
        problems.append(f"cycle between {', '.join(component)}:\n    " + "\n    ".join(edges))
    assert not problems, _report("import cycles (module-level imports)", problems)


def test_imports_inside_functions_say_why():
    problems = [f"{imp.path}:{imp.line}: import inside a function without '# lazy: <why>'"
                for imp in all_imports() if imp.in_function and not imp.lazy_comment]
    assert not problems, _report("imports inside functions without a reason", problems)


def test_product_files_stay_small():
    problems = []
    for path in product_files():
        n = len(path.read_text().splitlines())
        if n > MAX_LINES and str(path.relative_to(ROOT)) not in ONE_IDEA:
            problems.append(f"{path.relative_to(ROOT)}:{n}: {n} lines (at most {MAX_LINES})")
    assert not problems, _report(f"product files over {MAX_LINES} lines", problems)


# The checker itself, on small sources: a wrong resolver would make the rules above pass vacuously.

def test_relative_imports_resolve_to_project_modules():
    imps = _imports_of(ROOT / "engine/spark/job.py",
                       ["from . import source", "from ..rule import x", "from ...collector import histogram",
                        "import numpy", "from collector.influx import InfluxClient"])
    assert [i.targets for i in imps] == [("engine.spark.source",), ("engine.rule",), ("collector.histogram",),
                                         (), ("collector.influx",)]
    assert module_name(ROOT / "collector/influx/__init__.py") == "collector.influx"


def test_function_imports_and_their_reason_are_seen():
    src = ["import os", "def f():", "    import pyspark  # lazy: Spark loads only when a job runs",
           "    from engine import rule", "if TYPE_CHECKING:", "    from alerts import rules"]
    imps = _imports_of(ROOT / "collector/x.py", src)
    assert [(i.line, i.in_function, i.lazy_comment, i.type_only) for i in imps] == [
        (1, False, False, False), (3, True, True, False), (4, True, False, False), (6, False, False, True)]


def test_engine_parts_are_named_by_their_first_two_names():
    assert [engine_part(m) for m in ("engine.formats.log", "engine.rule", "engine", "collector.codec")] == [
        "engine.formats", "engine.rule", None, None]
    assert _engine_layer("engine.wire") < _engine_layer("engine.formats") < _engine_layer("engine.spark")


def test_a_cycle_is_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# -- the metrics backend boundary (collector/metrics/) and the catalogue of figures (collector/catalogue.py)

INFLUX = "collector.influx"
#: Where a process picks its backend: the alerts' wiring point.
INFLUX_WIRING = {"alerts/wiring.py"}
#: Product files outside collector/influx/ that still import it, to be moved off it by their owners (issue 47,
#: item 3): writers take `Point` and `PointSink` from `collector.metrics` and get their writer from one factory;
#: the pages and exports read through a reader and catch `collector.metrics.backend.MetricsError`. The target is
#: at most 5 importers in all; this set only shrinks.
INFLUX_IMPORTERS_TO_MIGRATE = frozenset({
    "collector/backpressure.py", "collector/graphite.py", "collector/points.py",                  # Point only
    "collector/testing.py",                                                                       # line protocol check
    "collector/query/bench_runs.py", "collector/query/panels.py", "collector/query/store.py",     # the pages' store
    "spark_listener/executors.py", "spark_listener/listener.py", "spark_listener/monitor.py", "spark_listener/points.py",
    "metrics_ui/alerts_banner.py", "metrics_ui/app.py", "metrics_ui/components.py", "metrics_ui/export.py",
    "metrics_ui/pages/alerts.py", "metrics_ui/pages/compare.py", "metrics_ui/pages/job.py", "metrics_ui/pages/runs.py",
    "metrics_ui/pages/step.py", "metrics_ui/query_compare.py", "metrics_ui/status_panels.py",
    "marketspread/cli.py", "marketspread/demo.py", "marketspread/ingress.py", "marketspread/metrics_wiring.py",
    "marketspread/replay.py", "marketspread/runner.py", "perf/perftest.py", "perf/record.py",
    "perf/soak.py", "perf/spark_cluster.py",                                                     # moved from bench/
})


def influx_importers() -> list[str]:
    """Return the product files outside collector/influx/ that import it (at any place in the file)."""
    return sorted({imp.path for imp in all_imports() if not imp.path.startswith("collector/influx/")
                   and any(t == INFLUX or t.startswith(INFLUX + ".") for t in imp.targets)})


def test_influxdb_is_imported_only_where_a_backend_is_wired():
    importers = influx_importers()
    new = [p for p in importers if p not in INFLUX_WIRING | INFLUX_IMPORTERS_TO_MIGRATE]
    assert not new, (f"{len(new)} product files import {INFLUX} ({len(importers)} in all): " + ", ".join(new)
                     + "; use collector.metrics (Point, PointSink, MetricsReader, MetricsError)")
    assert [p for p in importers if p.startswith("alerts/")] == sorted(INFLUX_WIRING)


def test_the_backend_neutral_modules_import_no_backend():
    problems = [f"{imp.path}:{imp.line}: imports {t}" for imp in all_imports()
                if imp.path.startswith("collector/metrics/") or imp.path == "collector/catalogue.py"
                for t in imp.targets if t == INFLUX or t.startswith(INFLUX + ".")]
    assert not problems, _report("backend imports in backend-neutral modules", problems)


CATALOGUE = "collector/catalogue.py"
#: Files that still type Spark field names, to use the catalogue's FIELD_* constants (issue 47, item 2): the
#: listener's writers, the executor source's map, the backpressure point, the pages' store. Only shrinks.
FIELD_NAMES_TO_MIGRATE = frozenset({
    "collector/backpressure.py", "collector/graphite.py", "collector/query/panels.py", "collector/query/query_runs.py",
    "collector/query/spark_panels.py", "spark_listener/executors.py", "spark_listener/listener.py",
    "spark_listener/points.py",
})
#: Files where one of those words means something else.
FIELD_WORDS_ELSEWHERE = {"marketspread/cli.py": "trigger_ms: the job's Config setting (--trigger-ms)"}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def field_names_typed(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """Return (line, name) for each field name a string spells (whole, or quoted in a query); docstrings aside."""
    tree = ast.parse(source)
    quoted = re.compile(r'"(' + "|".join(sorted(map(re.escape, names))) + r')"')
    skip = _docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in names:
                found.add((node.lineno, node.value))
            found.update((node.lineno, m) for m in quoted.findall(node.value))
    return sorted(found)


def test_spark_field_names_are_typed_only_in_the_catalogue():
    from collector.catalogue import SPARK_FIELD_NAMES
    problems = []
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel == CATALOGUE or rel in FIELD_NAMES_TO_MIGRATE or rel in FIELD_WORDS_ELSEWHERE:
            continue
        problems += [f"{rel}:{line}: {name!r}; use collector.catalogue's FIELD_* or its figures"
                     for line, name in field_names_typed(path.read_text(), SPARK_FIELD_NAMES)]
    assert not problems, _report("Spark field names typed outside collector/catalogue.py", problems)


def test_the_field_scan_sees_literals_and_queries_not_docstrings():
    names = frozenset({"watermark_delay_ms", "heap_used_bytes"})
    src = ('"""Writes watermark_delay_ms."""\n'
           'a = {"watermark_delay_ms": 1}\n'
           "q = f'SELECT mean(\"heap_used_bytes\") FROM \"{M}\"'\n"
           'ok = ("watermark_delay", "heap_used_bytes_x", FIELD_HEAP_USED_BYTES)\n')
    assert field_names_typed(src, names) == [(2, "watermark_delay_ms"), (3, "heap_used_bytes")]
