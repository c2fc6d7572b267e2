"""The examples in examples/: plain PySpark jobs that run, stop cleanly and write real results.

Each Spark test runs an example as the user would (`python examples/<x>.py ...`, a real
local Spark in a subprocess) and checks its output against what the source produced by
the last batch Spark committed (its checkpoint's offsets), not against the example's own
summary line alone.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))
RATE = 200
TIMEOUT_S = 240
# The examples that stand for a user's own job, followed from outside: they must run without
# the product installed. (files_enrich.py imports the product's latency recorders on purpose.)
PLAIN = ("rate_windowed", "foreachbatch_sqlite", "stream_join")
# What the examples share (examples/_common.py, imported by name): it must not import the project either.
COMMON = "_common"
PROJECT_PACKAGES = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} | {"marketspread", "tests"}


def _env() -> dict[str, str]:
    # Spark's Python workers must run the venv's interpreter, as `scripts/setup` installs PySpark there.
    return {**os.environ, "PYSPARK_PYTHON": PYTHON}


def _command(name: str, work_dir: Path, *extra: str, duration: float = 8) -> list[str]:
    return [PYTHON, str(EXAMPLES / f"{name}.py"), "--duration", str(duration), "--rate", str(RATE),
            "--work-dir", str(work_dir), *extra]


def run_example(name: str, work_dir: Path, *extra: str) -> str:
    """Run an example for 8 s; return its summary line (its last line of output)."""
    done = subprocess.run(_command(name, work_dir, *extra), env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines and lines[-1].startswith(f"{name}: "), done.stdout
    return lines[-1]


def offsets_of(checkpoint: Path, batch: int) -> list:
    """Return a planned batch's end offset of each source (the rate source's: seconds since its start)."""
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    return [json.loads(line) for line in lines[2:]]     # "v1", the batch metadata, one line per source


def last_commit(checkpoint: Path) -> tuple[int, list]:
    """Return the last batch Spark committed and its sources' end offsets."""
    batch = max(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    return batch, offsets_of(checkpoint, batch)


def last_planned(checkpoint: Path) -> tuple[int, list]:
    """Return the last batch Spark planned (its offsets written) and its sources' end offsets.

    A sink's files may hold that batch's rows before its commit is written: a bound on every
    row written comes from here, not from `last_commit`.
    """
    batch = max(int(f.name) for f in (checkpoint / "offsets").iterdir() if f.name.isdigit())
    return batch, offsets_of(checkpoint, batch)


def committed_parquet(folder: Path) -> list[dict]:
    """Rows of the files Spark's file sink committed (its `_spark_metadata` log), as Spark's readers see them.

    A batch cut short by the query's stop leaves its files in the folder but not in the log.
    """
    log = folder / "_spark_metadata"
    entries = sorted((p for p in log.iterdir() if p.name.split(".")[0].isdigit()),   # not Hadoop's .crc files
                     key=lambda p: int(p.name.split(".")[0]))
    compacts = [i for i, p in enumerate(entries) if p.name.endswith(".compact")]
    files: set[str] = set()
    for entry in entries[compacts[-1] if compacts else 0:]:
        for line in entry.read_text().splitlines()[1:]:
            rec = json.loads(line)
            (files.add if rec.get("action", "add") == "add" else files.discard)(rec["path"])
    paths = [p.removeprefix("file://").removeprefix("file:") for p in sorted(files)]
    return [row for path in paths for row in pq.read_table(path).to_pylist()]


def _wait_for(predicate, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def _load(name: str, monkeypatch):
    """Import an example as a module (its `main()` does not run)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))        # as running it does: `from _common import ...`
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _db_totals(db: Path) -> tuple[int, int, int, int]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT sum(rows), sum(value_sum), max(max_value), count(*) FROM totals").fetchone()


def _db_progress(db: Path) -> tuple[int, int] | None:
    if not db.exists():
        return None
    with sqlite3.connect(db) as conn:
        try:
            return conn.execute("SELECT batch_id, replays_skipped FROM progress").fetchone()
        except sqlite3.OperationalError:        # the example is creating its tables
            return None


def _assert_db_matches_source(work_dir: Path) -> int:
    """Assert the database holds exactly the rows 0..n-1 the source produced by its last batch; return n."""
    checkpoint = work_dir / "checkpoint"
    batch = _db_progress(work_dir / "totals.sqlite")[0]
    # A stop can interrupt a batch after its write and before Spark commits it (the next
    # start replays it, and the database skips it): the database is then one batch ahead.
    assert last_commit(checkpoint)[0] in (batch, batch - 1)
    (end_seconds,) = offsets_of(checkpoint, batch)
    produced = end_seconds * RATE                 # rate source: value = 0, 1, ... at RATE rows a second
    rows, value_sum, max_value, keys = _db_totals(work_dir / "totals.sqlite")
    assert produced > 0
    assert (rows, value_sum, max_value, keys) == (produced, produced * (produced - 1) // 2, produced - 1, 10)
    return produced


def test_the_plain_examples_never_import_the_project():
    for f in (EXAMPLES / f"{name}.py" for name in (*PLAIN, COMMON)):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{f.name}:{node.lineno}: relative import"
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            project = [n for n in names if n.split(".")[0] in PROJECT_PACKAGES]
            assert not project, f"{f.name}:{node.lineno} imports {project}: an example is a user's own job"


def test_a_replayed_batch_id_is_not_added_twice(tmp_path, monkeypatch):
    example = _load("foreachbatch_sqlite", monkeypatch)
    db = tmp_path / "totals.sqlite"
    assert example.apply_batch(db, "q", 0, [(1, 2, 10, 7), (2, 1, 3, 3)])
    assert example.apply_batch(db, "q", 1, [(1, 1, 8, 8)])
    assert not example.apply_batch(db, "q", 1, [(1, 1, 8, 8)])       # Spark replays batch 1
    assert not example.apply_batch(db, "q", 0, [(1, 2, 10, 7)])
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT * FROM totals ORDER BY key").fetchall() == [(1, 3, 18, 8), (2, 1, 3, 3)]
        assert conn.execute("SELECT * FROM progress").fetchall() == [("q", 1, 2)]


def test_an_unreadable_database_path_is_a_clear_error(tmp_path):
    (tmp_path / "totals.sqlite").mkdir()          # a folder where the database file should be
    done = subprocess.run(_command("foreachbatch_sqlite", tmp_path), env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 2
    assert done.stderr.strip() == f"foreachbatch_sqlite: cannot open {tmp_path / 'totals.sqlite'}: unable to open database file"


@pytest.mark.slow                   # 15 s idle, 20-30 s on a busy machine
def test_rate_windowed_writes_closed_windows_and_drops_late_rows(tmp_path):
    line = run_example("rate_windowed", tmp_path)
    windows = pq.read_table(tmp_path / "windows").to_pylist()
    assert windows, line
    _, (end_seconds,) = last_commit(tmp_path / "checkpoint")
    assert sum(w["rows"] for w in windows) <= end_seconds * RATE
    for w in windows:
        assert (w["window_end"] - w["window_start"]).total_seconds() == 5
        assert 0 <= w["key"] < 10 and w["rows"] > 0 and w["avg_value"] >= 0
    assert int(re.search(r"(\d+) late rows dropped", line).group(1)) > 0, line
    assert f"{len(windows)} windows written" in line


@pytest.mark.slow                   # 15 s idle, 20-30 s on a busy machine
def test_foreachbatch_sqlite_holds_every_row_the_source_produced(tmp_path):
    line = run_example("foreachbatch_sqlite", tmp_path)
    produced = _assert_db_matches_source(tmp_path)
    assert f"holds {produced} rows over 10 keys (0 replayed" in line


@pytest.mark.slow
def test_foreachbatch_sqlite_skips_the_batch_spark_replays_after_a_crash(tmp_path):
    db = tmp_path / "totals.sqlite"
    # Each batch sleeps 4 s after its write, before Spark commits it: killed then, the
    # database has the batch and the checkpoint does not, so the restart replays it.
    job = subprocess.Popen(_command("foreachbatch_sqlite", tmp_path, "--slow-ms", "4000", duration=0),
                           env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        _wait_for(lambda: (_db_progress(db) or (-1,))[0] >= 1)
        time.sleep(1)
    finally:
        os.killpg(job.pid, signal.SIGKILL)           # the driver and its JVM, as a crash would
        job.wait()
    written = _db_progress(db)[0]
    assert not (tmp_path / "checkpoint" / "commits" / str(written)).exists()
    line = run_example("foreachbatch_sqlite", tmp_path)
    assert _db_progress(db)[1] >= 1, line             # the replay was seen and skipped
    _assert_db_matches_source(tmp_path)


@pytest.mark.slow                   # 10 s idle, up to 40 s on a busy machine
def test_ctrl_c_stops_the_query_cleanly(tmp_path):
    job = subprocess.Popen(_command("foreachbatch_sqlite", tmp_path, duration=0), env=_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (_db_progress(tmp_path / "totals.sqlite") or (-1,))[0] >= 2)
        job.send_signal(signal.SIGINT)
        out, err = job.communicate(timeout=TIMEOUT_S)
    finally:
        job.kill()
    assert job.returncode == 0, err[-3000:]
    assert "interrupted, stopping the query after its current batch" in err
    assert out.strip().splitlines()[-1].startswith("foreachbatch_sqlite: ")
    _assert_db_matches_source(tmp_path)


@pytest.mark.slow                   # 15 s idle, 20-30 s on a busy machine
def test_stream_join_matches_clicks_to_their_impressions(tmp_path):
    line = run_example("stream_join", tmp_path)
    joined = committed_parquet(tmp_path / "clicks")
    assert joined, line
    _, (imp_seconds, click_seconds) = last_planned(tmp_path / "checkpoint")
    assert len(joined) <= click_seconds * RATE // 2          # at most one impression per click
    assert len({r["ad"] for r in joined}) == len(joined)     # ... and one click per ad
    for r in joined:
        assert r["ad"] % 2 == 0 and r["ad"] < imp_seconds * RATE
        assert -5 <= (r["click_time"] - r["imp_time"]).total_seconds() <= 30
    assert f"{len(joined)} joined rows" in line
