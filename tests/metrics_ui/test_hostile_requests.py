"""The started `marketspread ui` (a real process reading a real InfluxDB) under crafted callback requests.

Every input of every callback `/_dash-dependencies` lists gets wrong-typed values, one
(callback, input) pair at a time, as a hand-written client would send them: the answer
is never a 500 and the dashboard's log holds no traceback.
"""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from collector.influx.server import free_port
from perf.fleet import wait_until
from tests.metrics_ui.test_security import UNSET, Ui, open_ui, proxied_ui  # noqa: F401  (fixtures)
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


# Range strings as Plotly and the server write them, each end in its own form; all read as UTC.
ZOOMS = [
    ("2026-11-28T07:03:03+00:00", "2026-11-28T07:03:58.859671+00:00"[:26]),    # aware, then naive (cut)
    ("2026-11-28T07:03:03+00:00", "2026-11-28T07:03:58.859671+00:00"),
    ("2026-11-28 07:03:03.5", "2026-11-28T07:03:59Z"),
    ("2026-11-28T08:03:03+01:00", "2026-11-28 07:03:59"),                       # +01:00 is 07:03:03 UTC
    ("2026-11-28 07:03:03.123456789", "2026-11-28T02:03:59-05:00"),
    ("2026-11-28 07:03:03", "2026-11-28 07:03:58.859671"),
]


@pytest.mark.parametrize("lo, hi", ZOOMS)
def test_a_zoom_whose_ends_differ_in_form_is_read_as_utc(lo, hi):
    from metrics_ui.components import zoom_to_range
    assert zoom_to_range({"xaxis.range[0]": lo, "xaxis.range[1]": hi}) == \
        ("2026-11-28", "07:03:03", "2026-11-28", "07:03:59")


def test_the_running_job_page_takes_a_zoom_with_one_aware_and_one_naive_end(live_ui):
    ui, proc = live_ui
    deps = json.loads(ui.request("GET", "/_dash-dependencies").body)
    dep = next(d for d in deps if "job-range.value" in d["output"] and
               all(i["property"] == "relayoutData" for i in d["inputs"]))
    for lo, hi in ZOOMS[:2]:
        zoom = {"xaxis.range[0]": lo, "xaxis.range[1]": hi}
        body = {"output": dep["output"], "outputs": _outputs(dep["output"]),
                "inputs": [_entry(i, zoom if k == 0 else None) for k, i in enumerate(dep["inputs"])],
                "state": [_entry(s, None) for s in dep["state"]],
                "changedPropIds": [f"{dep['inputs'][0]['id']}.relayoutData"]}
        r = ui.callback(body, origin=f"http://127.0.0.1:{ui.port}")
        assert r.status == 200, r.body[:300]
        got = json.loads(r.body)["response"]
        assert got["job-range"]["value"] == "custom"
        assert (got["job-from-time"]["value"], got["job-to-time"]["value"]) == ("07:03:03", "07:03:59")


def test_login_guessing_spread_over_many_addresses_meets_a_global_budget(proxied_ui):
    """Thirty addresses below the per-client limit, and one IPv6 /64 rotating its addresses."""
    from metrics_ui.throttle import GLOBAL_FAILURES, MAX_FAILURES
    from tests.metrics_ui.test_security import TOKEN

    def get(client: str, auth: str) -> int:
        return proxied_ui.request("GET", "/_dash-layout", {"Authorization": auth, "X-Forwarded-For": client}).status
    v6 = [get(f"2001:db8:1:2::{i:x}", f"Bearer guess-{i}") for i in range(1, 3 * MAX_FAILURES)]
    assert v6[:MAX_FAILURES] == [401] * MAX_FAILURES and set(v6[MAX_FAILURES:]) == {429}   # one /64, one client
    assert get("2001:db8:1:3::1", f"Bearer {TOKEN}") == 200                          # another /64 is not
    statuses = [get(f"10.0.{i}.{j}", f"Bearer guess-{i}-{j}") for j in range(MAX_FAILURES - 1) for i in range(30)]
    assert 429 in statuses and statuses.count(401) <= GLOBAL_FAILURES
    assert get("10.9.9.9", f"Bearer {TOKEN}") == 429             # logging in waits for everyone meanwhile


def _trickle(port: int, closed: list, stop: threading.Event) -> None:
    """Send a request's headers one byte a second (under the idle timeout), until the server closes."""
    data = b"GET /_dash-layout HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            for i in range(len(data)):
                if stop.wait(1.0):
                    return
                s.send(data[i:i + 1])
                s.settimeout(0.01)
                try:
                    if s.recv(1024) == b"":
                        closed.append(i)
                        return
                except socket.timeout:
                    pass
    except OSError:
        closed.append(-1)


def test_trickling_headers_do_not_hold_the_dashboards_connections(open_ui):
    """`open_ui`: 20 connections at most, 2-s timeout; 20 clients trickle headers a byte a second."""
    from tests.metrics_ui.test_security import CONNECTIONS
    closed, stop = [], threading.Event()
    threads = [threading.Thread(target=_trickle, args=(open_ui.port, closed, stop), daemon=True)
               for _ in range(CONNECTIONS)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60    # a trickle needs 250 s to send its headers: only a close ends it sooner
        while len(closed) < CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(closed) == CONNECTIONS, f"{CONNECTIONS - len(closed)} trickling connections still held"
        assert open_ui.request("GET", "/_dash-layout").status == 200
    finally:
        stop.set()
