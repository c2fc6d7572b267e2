"""The one settings layer: `collector.settings`, and no other module reading or writing the environment."""
from __future__ import annotations

import ast
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from collector.settings import PROJECT_ROOT, default_state_dir, env_values, environment, parse_value
from engine.config import Config

PACKAGES = ("engine", "collector", "spark_listener", "alerts", "metrics_ui", "marketspread", "perf")
WRITE_METHODS = {"update", "setdefault", "pop", "popitem", "clear"}

# Reads of the process environment allowed outside collector/settings.py, and why.
READS_ALLOWED = {
    "collector/settings.py": "the settings layer: the one read of the process environment",
}
# Writes allowed, as (file, variable): none pass settings on.
WRITES_ALLOWED = {
    # PySpark's launcher contract: a driver started by plain `python` takes its workers'
    # interpreter only from PYSPARK_PYTHON (spark.pyspark.python is read by spark-submit alone).
    ("engine/spark/session.py", "PYSPARK_PYTHON"),
    ("engine/spark/session.py", "PYSPARK_DRIVER_PYTHON"),
    ("marketspread/watch.py", "PYSPARK_PYTHON"),          # the same contract, for a user's script
    ("marketspread/watch.py", "SPARK_LOCAL_IP"),          # Spark's launcher: the UI binds to it alone
}


def _product_files() -> list[Path]:
    return sorted(f for pkg in PACKAGES for f in (PROJECT_ROOT / pkg).rglob("*.py"))


def _is_os_attr(node: ast.AST, *names: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name)
            and node.value.id == "os")


def _uses(tree: ast.AST) -> tuple[list[tuple[int, str]], list[tuple[int, str | None]]]:
    """Return (reads, writes) of the process environment: (line, what) and (line, variable if constant)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    reads, writes = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ("environ", "environb", "getenv", "putenv", "unsetenv"):
                    reads.append((node.lineno, f"from os import {alias.name}"))   # hides later uses from the walk
        if _is_os_attr(node, "putenv", "unsetenv"):
            writes.append((node.lineno, None))
        elif _is_os_attr(node, "getenv", "environb"):
            reads.append((node.lineno, f"os.{node.attr}"))
        elif _is_os_attr(node, "environ"):
            up = parents.get(node)
            key = None
            if isinstance(up, ast.Attribute) and up.attr in WRITE_METHODS:
                call = parents.get(up)
                if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
                    key = call.args[0].value
                writes.append((node.lineno, key))
            elif isinstance(up, ast.Subscript) and isinstance(up.ctx, (ast.Store, ast.Del)):
                writes.append((node.lineno, None))
            elif isinstance(up, ast.AugAssign) and up.target is node:
                writes.append((node.lineno, None))
            else:
                reads.append((node.lineno, "os.environ"))
    return reads, writes


def test_only_the_settings_layer_reads_the_environment_and_nothing_writes_it():
    bad = []
    for f in _product_files():
        rel = f.relative_to(PROJECT_ROOT).as_posix()
        reads, writes = _uses(ast.parse(f.read_text(), str(f)))
        bad += [f"{rel}:{line}: reads {what} (go through collector.settings)"
                for line, what in reads if rel not in READS_ALLOWED]
        bad += [f"{rel}:{line}: writes the environment ({key or '?'}); pass env= to child processes"
                for line, key in writes if (rel, key) not in WRITES_ALLOWED]
    assert not bad, "\n".join(bad)


def test_the_walk_sees_every_kind_of_write_and_read():
    reads, writes = _uses(ast.parse(
        "import os\nfrom os import environ\nos.environ['A'] = '1'\nos.environ.update(B='2')\n"
        "os.environ.setdefault('C', '3')\nos.environ.pop('D', None)\nos.putenv('E', '5')\ndel os.environ['F']\n"
        "os.environ['G'] += 'x'\nx = os.environ.get('H')\ny = os.getenv('I')\nz = dict(os.environ)\n"))
    assert sorted(line for line, _ in writes) == [3, 4, 5, 6, 7, 8, 9]
    assert ("C" in {k for _, k in writes}) and sorted(line for line, _ in reads) == [2, 10, 11, 12]


def test_product_tree_is_walked():
    files = {f.relative_to(PROJECT_ROOT).as_posix() for f in _product_files()}
    assert "collector/settings.py" in files and "perf/perftest.py" in files and "metrics_ui/app.py" in files


@pytest.mark.parametrize("typ, raw, value", [
    ("int", "42", 42), ("float", "0.5", 0.5), ("bool", "Yes", True), ("bool", "off", False),
    ("bool", "1", True), ("Path", "/x/y", Path("/x/y")), ("str", "local[*]", "local[*]"),
    ("int | None", "7", 7), ("Optional[int]", "8", 8), (int, "9", 9), (bool, "true", True),
])
def test_parse_value_types(typ, raw, value):
    assert parse_value(typ, raw, "MS_X") == value


@pytest.mark.parametrize("typ, raw, message", [
    ("int", "x", "MS_X='x' is not a valid int"), ("float", "soon", "MS_X='soon' is not a valid float"),
    ("bool", "maybe", "MS_X='maybe' is not a valid bool"), ("int | None", "1.5", "MS_X='1.5' is not a valid int"),
])
def test_parse_value_names_the_variable(typ, raw, message):
    with pytest.raises(ValueError) as e:
        parse_value(typ, raw, "MS_X")
    assert str(e.value) == message


@dataclass(frozen=True)
class _Sample:
    port: int = 1
    ratio: float = 0.5
    on: bool = False
    name: str = "a"
    where: Path | None = None
    spool_max_bytes: int = 0


def test_env_values_prefix_names_and_empty_as_unset():
    environ = {"MS_T_PORT": "80", "MS_T_RATIO": "", "MS_T_ON": "yes", "MS_T_WHERE": "/w",
               "MS_T_SPOOL_BYTES": "10", "MS_T_SPOOL_MAX_BYTES": "99", "MS_PORT": "1"}
    got = env_values(_Sample, environ, prefix="MS_T_", names={"spool_max_bytes": "SPOOL_BYTES"})
    assert got == {"port": 80, "on": True, "where": Path("/w"), "spool_max_bytes": 10}
    assert env_values(_Sample, {}) == {}
    with pytest.raises(ValueError, match="MS_T_PORT='eighty' is not a valid int"):
        env_values(_Sample, {"MS_T_PORT": "eighty"}, prefix="MS_T_")


def test_none_means_this_process_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MS_T_PORT", "81")
    monkeypatch.setenv("MS_STATE_DIR", str(tmp_path))
    assert env_values(_Sample, prefix="MS_T_") == {"port": 81}
    assert environment()["MS_T_PORT"] == "81" and environment({}) == {}
    assert default_state_dir() == tmp_path
    assert default_state_dir({}) == PROJECT_ROOT / ".state"


def test_config_from_env():
    cfg = Config.from_env({"MS_SHARDS": "3", "MS_FSYNC": "no", "MS_STATE_DIR": "/s", "MS_MASTER": ""},
                          trigger_ms=5, host=None)
    assert (cfg.shards, cfg.fsync, cfg.state_dir, cfg.master, cfg.trigger_ms, cfg.host) == \
        (3, False, Path("/s"), "local[*]", 5, "127.0.0.1")
    assert Config.from_env({}, state_dir="rel").state_dir == Path("rel")
    with pytest.raises(ValueError, match=r"^MS_SHARDS='x' is not a valid int$"):
        Config.from_env({"MS_SHARDS": "x"})


def test_ui_config_from_env_keeps_the_refresh_default_when_unset(monkeypatch):
    """An unset MS_UI_REFRESH_MS once gave refresh_ms=None: a live interval of no period made
    the browser fire callbacks without pause until it ran out of sockets."""
    from metrics_ui import components
    from metrics_ui.app import UiConfig
    monkeypatch.delenv("MS_UI_REFRESH_MS", raising=False)
    assert UiConfig.from_env().refresh_ms == components.REFRESH_MS
    monkeypatch.setenv("MS_UI_REFRESH_MS", "")
    assert UiConfig.from_env().refresh_ms == components.REFRESH_MS
    monkeypatch.setenv("MS_UI_REFRESH_MS", "5000")
    assert UiConfig.from_env().refresh_ms == 5000


def _job_parser():
    """The `job` command's parser: it takes every Config flag (common, job and retention)."""
    import argparse
    from marketspread.cli import build_parser
    sub = next(a for a in build_parser(["job"])._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["job"]


def test_every_config_field_has_one_flag_one_variable_and_its_default_in_the_help():
    from collector.settings import setting_flags, shown
    declared = setting_flags(Config)
    assert [f.name for f in declared] == [f.name for f in fields(Config)]       # none without its flag
    assert len({f.option for f in declared}) == len(declared)
    parser = _job_parser()
    by_dest: dict[str, list[str]] = {}
    for action in parser._actions:
        by_dest.setdefault(action.dest, []).extend(action.option_strings)
    help_text = " ".join(parser.format_help().split())
    defaults = Config.from_env({})
    for f in declared:
        assert by_dest.get(f.name) == [f.option], (f.name, by_dest.get(f.name))
        assert f"[MS_{f.name.upper()}, default {shown(getattr(defaults, f.name), f.name)}]" in help_text, f.name
        assert env_values(Config, {f"MS_{f.name.upper()}": str(getattr(defaults, f.name))}) == \
            {f.name: getattr(defaults, f.name)}                                  # one variable each, read back


@pytest.mark.parametrize("argv, field, value", [
    (["job", "--no-fsync"], "fsync", False), (["job", "--no-metrics"], "metrics", False),
    (["job", "--keep-log"], "log_retention", False), (["job", "--count-bytes-read"], "count_bytes_read", True),
    (["job", "--spark-ui"], "spark_ui", True), (["job", "--shards", "3"], "shards", 3),
    (["job", "--state-dir", "/s"], "state_dir", Path("/s")), (["ingress", "--host", "0.0.0.0"], "host", "0.0.0.0"),
    (["demo", "--results-retention", "1h"], "results_retention", "1h"),
    (["job", "--checkpoint-batches", "7"], "checkpoint_batches", 7),
    (["rescale", "--shards", "4"], "shards", 4),
])
def test_flags_set_their_field_and_a_flag_not_given_leaves_the_environment_s(argv, field, value, monkeypatch):
    from marketspread.cli import build_parser, config_from
    for f in fields(Config):
        monkeypatch.delenv(f"MS_{f.name.upper()}", raising=False)
    assert getattr(config_from(build_parser(argv).parse_args(argv)), field) == value
    monkeypatch.setenv("MS_TRIGGER_MS", "9")
    assert config_from(build_parser(argv).parse_args(argv)).trigger_ms == 9


def test_max_backlog_alone_sets_the_resume_mark_to_half_of_it(monkeypatch):
    from marketspread.cli import build_parser, config_from
    monkeypatch.delenv("MS_RESUME_BACKLOG", raising=False)
    monkeypatch.delenv("MS_MAX_BACKLOG", raising=False)
    cfg = config_from(build_parser(["ingress"]).parse_args(["ingress", "--max-backlog", "1000"]))
    assert (cfg.max_backlog, cfg.resume_backlog) == (1000, 500)
    argv = ["ingress", "--max-backlog", "1000", "--resume-backlog", "100"]
    assert config_from(build_parser(argv).parse_args(argv)).resume_backlog == 100


def test_the_operations_settings_table_names_every_config_variable_and_flag():
    """docs/OPERATIONS.md's settings table: each field's variable, and the flag beside it is the declared one."""
    import re
    from collector.settings import setting_flags
    text = (PROJECT_ROOT / "docs" / "OPERATIONS.md").read_text()
    table = text[text.index("## Settings"):]
    rows = [line for line in table.splitlines() if line.startswith("| `MS_")]
    for f in setting_flags(Config):
        var = f"`MS_{f.name.upper()}`"
        [row] = [r for r in rows if var in r.split("|")[1]]
        named = re.findall(r"`MS_([A-Z_]+)` \(`(--[a-z-]+)`\)", row.split("|")[1])
        assert (f.name.upper(), f.option) in named, (f.name, row)


def _options(parser) -> set[str]:
    """Every option string of `parser` and of the subcommands under it."""
    import argparse
    found = set()
    for action in parser._actions:
        found |= set(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options(sub)
    return found


def test_the_operations_command_synopsis_names_only_flags_the_commands_take():
    """docs/OPERATIONS.md's "Command line" block is typed by hand: each flag in it must exist."""
    import argparse
    import re
    from marketspread.cli import build_parser
    text = (PROJECT_ROOT / "docs" / "OPERATIONS.md").read_text()
    block = text[text.index("## Command line"):text.index("## Settings")]
    command, bad = None, []
    for line in block.splitlines():
        if line.startswith("marketspread "):
            command = line.split()[1]
        if command is None or command.startswith("-"):
            continue
        root = build_parser([command])
        sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
        known = _options(sub.choices[command])
        bad += [f"{command} {flag}" for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line.split("#")[0])
                if flag not in known]
    assert command is not None and not bad, bad
