"""`marketspread alerts` as a user runs it: its `main` in-process, real files, a real InfluxDB; a
process of its own where the process is the point (a memory cap, the modules a command imports)."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

from collector.settings import PROJECT_ROOT

from ..cli_inprocess import run_main

ROOT = PROJECT_ROOT


# "Billion laughs": 9 levels of 9 aliases, 9^9 strings once expanded, in a few hundred bytes.
_LEVELS = "abcdefghi"
BOMB = ('a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
        + "".join(f"{k}: &{k} [{', '.join([f'*{p}'] * 9)}]\n" for p, k in zip(_LEVELS, _LEVELS[1:]))
        + "rules:\n  - name: *i\n    condition: p99 > 1ms\n")


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return run_main(["alerts", *args], env)


def _cli_process(env: dict, *args: str, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marketspread", "alerts", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, preexec_fn=preexec_fn)


def _cap_memory() -> None:
    """Cap the child's address space (2 GiB): an expanding bomb then fails fast instead of eating the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_alerts_cli_manages_rules_and_reports_bad_input_in_one_line(influx_client, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MS_STATE_DIR": str(tmp_path / "state"),
           **influx_client.config.as_env()}
    env.pop("MS_ALERTS_FILE", None)
    ok = _cli(env, "add", "e2e", "p99 > 5ms", "--pipeline", "orders", "--for", "30s",
              "--webhook", "https://user:secret@hooks.example/x?token=t")
    assert ok.returncode == 0, ok.stderr
    assert "added e2e: any job · orders · start-to-end: p99 > 5ms over 1m for 30s" in ok.stdout

    for args, message in ((("add", "e2e", "p99 > 9ms"), "exists already (use --replace"),
                          (("add", "x", "p99 > 5"), "needs a unit"),
                          (("add", "x", "p99 > 5ms", "--webhook", "file:///etc/passwd"), "http:// or https://"),
                          (("add", "x y", "p99 > 5ms"), "name 'x y' may use only letters, digits"),
                          (("add", "x\n", "p99 > 5ms"), "name 'x\\n' contains a control character"),
                          (("add", "x", "p99 > 5ms", "--step", "../sink"), "step '../sink' looks like a path"),
                          (("add", "x", "p99 > 5ms", "--job", "run\n"), "job (run) 'run\\n' contains a control"),
                          (("rm", "nope"), "no rule called 'nope'"),
                          (("load", str(tmp_path / "missing.yaml")), "does not exist")):
        out = _cli(env, "--state-dir", str(tmp_path / "state"), *args)
        assert out.returncode == 2, args
        err = out.stderr
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1

    yml = tmp_path / "rules.yaml"
    yml.write_text("rules:\n  - name: slow\n    condition: throughput < 10k/s\n    window: 2m\n"
                   "  - name: e2e\n    condition: p99.9 > 1s\n")
    out = _cli(env, "load", str(yml))
    assert out.returncode == 0 and "1 added, 1 replaced (2 rules" in out.stdout
    assert _cli(env, "mute", "slow").returncode == 0

    listed = _cli(env, "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["e2e", "OK"] and "p99.9 > 1s" in lines[0] and "secret" not in listed.stdout
    assert "slow" in lines[1] and "(muted)" in lines[1]

    # the evaluator alone: one cycle against the real server, then a clean stop
    served = _cli(env, "serve", "--interval", "0.5", "--duration", "2")
    assert served.returncode == 0, served.stderr
    status = json.loads((tmp_path / "state" / "alerts" / "evaluator.json").read_text())
    assert status["rules"] == 2 and status["errors"] == {}
    assert "last cycle" in _cli(env, "list").stderr

    assert _cli(env, "rm", "slow").returncode == 0
    doc = json.loads((tmp_path / "state" / "alerts" / "rules.json").read_text())
    assert [r["name"] for r in doc["rules"]] == ["e2e"]


def test_alerts_load_refuses_bombs_and_oversized_files_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MS_STATE_DIR": str(tmp_path / "state")}
    env.pop("MS_ALERTS_FILE", None)
    assert len(BOMB) < 500
    cases = (("bomb.yaml", BOMB, "uses a YAML anchor or alias (& or *) at line 1"),
             ("big.yaml", "#" * (1 << 20) + "\n", "is larger than 1,048,576 bytes"),
             ("deep.yaml", "[" * 10_000 + "]" * 10_000, "nests more than 20 levels deep"))
    for name, text, message in cases:
        path = tmp_path / name
        path.write_text(text)
        # the bomb in a process of its own under a memory cap: were it ever expanded, it would
        # fail fast there instead of eating the test's process and the machine
        out = _cli_process(env, "load", str(path), preexec_fn=_cap_memory) if name == "bomb.yaml" else \
            _cli(env, "load", str(path))
        assert out.returncode == 2, (name, out.stderr[-500:])
        assert message in out.stderr and "Traceback" not in out.stderr, (name, out.stderr[-500:])
        assert len(out.stderr.strip().splitlines()) == 1, name
    assert not (tmp_path / "state" / "alerts" / "rules.json").exists()


def test_a_quick_command_imports_only_what_it_needs(tmp_path):
    """`alerts ...` must not load the dashboard (Dash, Flask, plotly): a one-shot command answers at once
    (the YAML bomb is refused by the CLI in ~0.15 s, was ~1.2-2 s of start-up)."""
    code = ("import sys; from marketspread.cli import main; rc = main(['alerts', 'list']); "
            "print(sorted(m for m in ('dash', 'flask', 'plotly', 'pyspark', 'pandas') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MS_STATE_DIR": str(tmp_path), "MS_INFLUX_URL": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr
