"""Settings read once and carried: no product module reads the environment on its own (ast, no import).

`collector.settings` is the one module that touches `os.environ`. Every function with an
`environ` parameter (`default_state_dir`, `env_values`, `prefixed_env`, `env_is_set`, each
record's `from_env`, ...) reads this process's environment when given none; such a call
is allowed only where records are built: at an entry point (`ENTRY_POINTS`), or inside
another builder, which hands its own mapping on. Everything below an entry point gets
the records (`Config`, `InfluxConfig`, `AlertSettings`, `UiConfig` on the Flask app).
Writes of the environment are `tests/test_settings.py`'s (for a child process only).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

from tests.test_settings import _uses

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "collector", "spark_listener", "alerts", "metrics_ui", "marketspread", "perf")
SETTINGS = "collector/settings.py"
#: Where a builder may read this process's environment: a whole command-line module, or one
#: function, with the reason. Library entry points are here because their callers (a user's
#: PySpark script, tests) have no records to give; the product's own commands pass theirs.
ENTRY_POINTS: dict[str | tuple[str, str], str] = {
    "marketspread/cli.py": "the `marketspread` commands: each builds its Config, InfluxConfig, AlertSettings once",
    "alerts/cli.py": "the `alerts` commands: `run` builds the settings, carried in args",
    ("collector/influx/server.py", "run"): "the `influxdb` command",
    ("alerts/alertmanager_server.py", "run"): "the `alertmanager` command",
    ("metrics_ui/app.py", "add_arguments"): "the `ui` command's flag defaults (MS_UI_HOST, MS_UI_PORT)",
    ("metrics_ui/app.py", "run"): "the `ui` command: UiConfig, kept on the Flask app",
    ("metrics_ui/app.py", "create_app"): "the app factory given no UiConfig (a WSGI server's import)",
    ("alerts/evaluator.py", "start_evaluator"): "a library caller giving no AlertSettings or client (tests)",
    ("marketspread/ingress.py", "run_ingress"): "a library caller giving no InfluxConfig (tests)",
    ("marketspread/replay.py", "replay"): "a library caller giving no InfluxConfig (tests, in-process replays)",
    ("spark_listener/monitor.py", "__init__"): "monitor() in a user's job: the environment is its only settings",
    ("spark_listener/monitor.py", "_open_writer"): "monitor() in a user's job, as above (read in start(), "
                                                   "where a bad setting stops the monitor, not the job)",
    ("spark_listener/monitor.py", "executor_metrics_conf"): "a user's job, before its session exists",
    ("marketspread/watch.py", "watch"): "the `watch` command: whether the user chose Spark's addresses "
                                        "(SPARK_LOCAL_IP, --master in PYSPARK_SUBMIT_ARGS)",
    ("spark_listener/monitor.py", "_start_alerts"): "monitor() in a user's job: the alert settings, as above",
    ("spark_listener/latency.py", "_spool"): "record_latency() in a user's job: the default spool folder",
    ("engine/spark/session.py", "build_session"): "SPARK_LOCAL_IP, Spark's own variable, read where Spark's "
                                                  "session is built: whether the user chose the driver's address",
}


def _product_files() -> list[Path]:
    return sorted(f for pkg in PACKAGES for f in (ROOT / pkg).rglob("*.py"))


def _environ_index(fn: ast.FunctionDef | ast.AsyncFunctionDef, is_method: bool) -> int | None:
    """Return the call-site position of `fn`'s `environ` parameter (-1: keyword only; None: it has none)."""
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    if "environ" not in names:
        return None if "environ" not in [a.arg for a in fn.args.kwonlyargs] else -1
    is_bound = is_method and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    return names.index("environ") - (1 if is_bound else 0)


@functools.cache
def readers() -> dict[str, int]:
    """Return the functions that read this process's environment when given no mapping, by name."""
    found: dict[str, int] = {}
    for path in _product_files():
        tree = ast.parse(path.read_text(), str(path))
        methods = {id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                index = _environ_index(node, id(node) in methods)
                if index is not None:
                    found[node.name] = index
    return found


def environment_reads(source: str, rel: str, known: dict[str, int]) -> list[tuple[int, str, str]]:
    """Return (line, enclosing function, what) for each read of the environment in a module's source."""
    tree = ast.parse(source, rel)
    functions = sorted(((fn.lineno, fn.end_lineno or fn.lineno, fn.name) for fn in ast.walk(tree)
                        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))), key=lambda f: f[0])

    def enclosing(line: int) -> str:
        inside = [name for first, last, name in functions if first <= line <= last]
        return inside[-1] if inside else "<module>"       # the innermost: the last to start

    found: list[tuple[int, str, str]] = []
    if rel != SETTINGS:
        found += [(line, enclosing(line), what) for line, what in _uses(tree)[0]]
    for node in ast.walk(tree):
        where = enclosing(getattr(node, "lineno", 0))
        if isinstance(node, ast.ImportFrom) and node.module == "collector.settings" and rel != SETTINGS:
            found += [(node.lineno, where, "imports environment()") for a in node.names if a.name == "environment"]
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else \
            node.func.id if isinstance(node.func, ast.Name) else None
        if name == "environment" and rel != SETTINGS:
            found.append((node.lineno, where, "environment()"))
        elif name in known and rel != SETTINGS:
            index = known[name]
            given = (0 <= index < len(node.args)) or any(k.arg in ("environ", None) for k in node.keywords)
            if not given:
                found.append((node.lineno, where, f"{name}() without a mapping: this process's environment"))
    return sorted(set(found))


def _allowed(rel: str, function: str) -> bool:
    return rel in ENTRY_POINTS or (rel, function) in ENTRY_POINTS


def test_only_entry_points_read_the_environment():
    known = readers()
    bad = []
    for path in _product_files():
        rel = path.relative_to(ROOT).as_posix()
        bad += [f"{rel}:{line}: {what} in {function}() (take the records from the caller; entry points: "
                f"ENTRY_POINTS)" for line, function, what in environment_reads(path.read_text(), rel, known)
                if not (_allowed(rel, function) and "without a mapping" in what)]
    assert not bad, f"{len(bad)} reads of the environment outside the settings layer:\n  " + "\n  ".join(bad)


def test_every_entry_point_still_exists():
    """An entry of ENTRY_POINTS whose file or function is gone would allow reads silently."""
    missing = []
    for key in ENTRY_POINTS:
        rel, function = (key, None) if isinstance(key, str) else key
        path = ROOT / rel
        if not path.is_file():
            missing.append(rel)
        elif function is not None and not any(
                isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function
                for n in ast.walk(ast.parse(path.read_text()))):
            missing.append(f"{rel}: {function}")
    assert not missing, missing


def test_the_scan_sees_each_kind_of_read():
    known = {"from_env": 0, "default_state_dir": 0, "env_values": 1}
    src = ("import os\n"
           "from collector.settings import environment\n"
           "def deep(environ=None):\n"
           "    a = os.environ.get('X')\n"
           "    b = environment().get('Y')\n"
           "    c = InfluxConfig.from_env()\n"
           "    d = InfluxConfig.from_env(environ)\n"
           "    e = default_state_dir()\n"
           "    f = env_values(Config, environ, prefix='MS_')\n"
           "    g = env_values(Config, prefix='MS_')\n"
           "    h = Config.from_env(environ=environ, shards=2)\n"
           "    i = Config.from_env(shards=2)\n")
    got = [(line, function) for line, function, _ in environment_reads(src, "engine/x.py", known)]
    assert got == [(2, "<module>"), (4, "deep"), (5, "deep"), (6, "deep"), (8, "deep"),
                   (10, "deep"), (12, "deep")]
    assert environment_reads(src, SETTINGS, known) == []


def test_the_readers_are_found():
    known = readers()
    assert known["default_state_dir"] == 0 and known["env_values"] == 1 and known["from_env"] == 0
    assert known["prefixed_env"] == 1 and known["env_is_set"] == 1
