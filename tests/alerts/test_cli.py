"""`marketspread alerts` as a user runs it: a real process, real files, a real InfluxDB."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "alerts", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_alerts_cli_manages_rules_and_reports_bad_input_in_one_line(influx_client, tmp_path, capsys):
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
                          (("add", "x y", "p99 > 5ms"), "name 'x y' must be 1-100 characters of letters"),
                          (("add", "x", "p99 > 5ms", "--step", "sink' OR 1=1"), "step"),
                          (("rm", "nope"), "no rule called 'nope'"),
                          (("load", str(tmp_path / "missing.yaml")), "does not exist")):
        # in-process (the same `main` as the console script) to keep the test short
        assert main(["alerts", "--state-dir", str(tmp_path / "state"), *args]) == 2, args
        err = capsys.readouterr().err
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
