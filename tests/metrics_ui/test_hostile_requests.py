"""The started `marketspread ui` (a real process reading a real InfluxDB) under crafted callback requests.

Every input of every callback `/_dash-dependencies` lists gets wrong-typed values, one
(callback, input) pair at a time, as a hand-written client would send them: the answer
is never a 500 and the dashboard's log holds no traceback.
"""
from __future__ import annotations

import json

import pytest

from collector.influx.server import free_port
from perf.fleet import wait_until
from tests.metrics_ui.test_security import UNSET, Ui
from tests.reliability.harness import fleet_for

WRONG = (None, 5, -1.5, True, "a", "x" * 100_000, [[1, [2, None]]], {"a": {"b": []}}, [])


@pytest.fixture(scope="module")
def live_ui(tmp_path_factory, influxdb):
    """`marketspread ui` on a free port reading a fresh database of the test InfluxDB."""
    from tests.conftest import fresh_database
    root = tmp_path_factory.mktemp("hostile-ui")
    gen = fresh_database(influxdb, "t_hostile_ui")
    client = next(gen)
    fleet = fleet_for(root, env={**client.config.as_env(), "MS_STATE_DIR": str(root / "state"),
                                 "MS_ALERTS_FILE": str(root / "rules.json")})
    for var in UNSET:
        fleet.env.pop(var, None)
    port = free_port()
    proc = fleet.spawn("ui", ["ui", "--port", port])
    ui = Ui(port, proc.popen.pid, root / "rules.json")

    def up() -> bool:
        try:
            return ui.request("GET", "/_dash-layout").status == 200
        except OSError:
            return False
    wait_until(up, 90, "the dashboard to answer", [proc])
    yield ui, proc
    fleet.stop_all()
    next(gen, None)


def _entry(item: dict, value) -> dict | list:
    """One input or state entry; a pattern-matching one (id in JSON) is a list of matches."""
    if item["id"].startswith("{"):
        return [{"id": json.loads(item["id"]), "property": item["property"], "value": value}]
    return {"id": item["id"], "property": item["property"], "value": value}


def _outputs(output: str):
    def one(text: str) -> dict:
        ident, prop = text.rsplit(".", 1)
        return {"id": json.loads(ident) if ident.startswith("{") else ident, "property": prop}
    if output.startswith(".."):
        return [one(o) for o in output.strip(".").split("...")]
    return one(output)


def test_every_callback_input_given_wrong_types_gets_no_500_and_the_log_no_traceback(live_ui):
    ui, proc = live_ui
    deps = json.loads(ui.request("GET", "/_dash-dependencies").body)
    assert len(deps) >= 10
    pages = ["/", "/compare", "/alerts", "/run/x", "/run/x/step/sink"]   # as a browser would have loaded them
    assert all(ui.request("GET", p).status in (200, 404) for p in pages)
    failures, sent = [], 0
    origin = f"http://127.0.0.1:{ui.port}"
    for dep in deps:
        for k, target in enumerate(dep["inputs"]):
            for value in WRONG:
                body = {"output": dep["output"], "outputs": _outputs(dep["output"]),
                        "inputs": [_entry(i, value if j == k else None) for j, i in enumerate(dep["inputs"])],
                        "state": [_entry(s, None) for s in dep["state"]],
                        "changedPropIds": [f"{target['id']}.{target['property']}"]}
                r = ui.callback(body, origin=origin)
                sent += 1
                if r.status >= 500:
                    failures.append(f"{target['id']}.{target['property']} = {str(value)[:20]!r}: {r.status}")
    log = proc.log_path.read_text(errors="replace")
    assert not failures, f"{len(failures)} of {sent} answered 5xx: " + "; ".join(failures[:30])
    assert "Traceback" not in log, log[-3000:]
    assert log.count("\n") < 200, "rejected requests must be logged rate-limited, not one line each"
