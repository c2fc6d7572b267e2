"""Every example job, run monitored by `marketspread watch`, is listed on the runs page with Spark's own figures."""
from __future__ import annotations

from datetime import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collector.influx.server import free_port

from .test_generic_pages import _row
from .test_pages import TIMEOUT, _wait_traces

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ("rate_windowed", "foreachbatch_sqlite", "stream_join", "files_enrich")

pytestmark = pytest.mark.slow          # four Spark applications and a browser, ~90 s


def _last_minute_rate(batches: list[dict]) -> float:
    """Return rows/s of the batches that started in the 60 s before the newest one's end, from Spark's own events."""
    def start(b: dict) -> float:
        return datetime.fromisoformat(b["timestamp"].replace("Z", "+00:00")).timestamp()
    end = max(start(b) + b["durationMs"]["triggerExecution"] / 1000 for b in batches)
    since = max(end - 60, min(start(b) for b in batches))
    return sum(b["numInputRows"] for b in batches if start(b) >= since) / (end - since)


def _run_examples(influx_client, tmp_path) -> dict[str, dict]:
    """Run every example under `watch` at once; return each one's own progress (Spark's, by the example)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MS_")}
    env.update(influx_client.config.as_env(), MS_STATE_DIR=str(tmp_path / "state"), PYSPARK_PYTHON=sys.executable)
    procs = {}
    for name in EXAMPLES:
        cmd = [sys.executable, "-m", "marketspread", "watch", "--", str(ROOT / "examples" / f"{name}.py"),
               "--duration", "6", "--work-dir", str(tmp_path / name), "--progress-out", str(tmp_path / f"{name}.json")]
        if name != "files_enrich":
            cmd += ["--rate", "200"]
        procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, (name, err[-3000:])
    return {name: json.loads((tmp_path / f"{name}.json").read_text())["progress"] for name in EXAMPLES}


def test_each_example_is_listed_with_its_last_minutes_throughput(dash_duo, ui_app, influx_client, tmp_path):
    progress = _run_examples(influx_client, tmp_path)
    for name, batches in progress.items():
        rows = influx_client.query('SELECT "batch_id", "input_rows", "input_rows_per_s" FROM "spark_progress" '
                                   'WHERE "run" = $run', {"run": name})
        got = {int(v[1]): v for v in rows[0].values}
        assert sorted(got) == [b["batchId"] for b in batches], name          # every batch, once
        for b in batches:
            assert got[b["batchId"]][2] == b["numInputRows"], name
    dash_duo.start_server(ui_app, port=free_port())
    for name, batches in progress.items():
        row = _row(dash_duo, "#runs-table", name)
        assert row[4] == f"{sum(b['numInputRows'] for b in batches):,}", (name, row)
        expected = _last_minute_rate(batches)
        shown = float(row[5].removesuffix(" rows/s").replace(",", ""))
        assert shown == pytest.approx(expected, rel=0.01, abs=0.5), (name, row, expected)   # Spark's own events
    # the job page of the example with recorded steps draws them in the order it declared
    dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/files_enrich")
    dash_duo._wait_for(lambda _d: [r[0] for r in dash_duo.driver.execute_script(
        "return Array.from(document.querySelectorAll('#job-steps-table tbody tr'),"
        "  tr => Array.from(tr.querySelectorAll('td'), td => td.innerText.trim()));")] == ["arrival", "enrich"],
        timeout=TIMEOUT, msg="files_enrich's steps not drawn in their declared order")
    dash_duo.find_element("#job-executors-toggle").click()           # the executors' charts: a click away
    assert _wait_traces(dash_duo, "job-executors-heap")

    # each example's job page: its run id, what a Spark user checks first drawn at once, every chart shown
    # drawn with data, and nothing for what it does not have (no state section without state, no empty table)
    drawn = ("return [...document.querySelectorAll('.js-plotly-plot')].filter(g => g.offsetParent !== null)"
             ".map(g => [g.closest('.dash-graph').id, (g.data || []).some(t => (t.y || []).length > 0)]);")
    for name in EXAMPLES:
        dash_duo.wait_for_page(url=f"{dash_duo.server_url}/run/{name}")
        assert dash_duo.find_element("#job-run-id-shown").text, name
        for graph in ("job-query-batches-duration", "job-query-batches-input", "job-sources-rates"):
            assert _wait_traces(dash_duo, graph), (name, graph)
        stateful = name in ("rate_windowed", "stream_join")
        assert dash_duo.find_element("#job-state").is_displayed() == stateful, name
        if stateful:
            dash_duo.find_element("#job-state-toggle").click()
            for graph in ("job-state-rows", "job-state-memory", "job-state-late"):
                assert _wait_traces(dash_duo, graph), (name, graph)
        assert dash_duo.find_element("#job-latency").is_displayed() == (name == "files_enrich"), name
        empty = [g for g, has_data in dash_duo.driver.execute_script(drawn) if not has_data]
        assert not empty, (name, empty)
        text = dash_duo.find_element("body").text
        assert not any(s in text for s in ("not reported", "no data", "no latency steps", "no backpressure")), name
    assert dash_duo.get_logs() == []
