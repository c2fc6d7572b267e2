"""Whatever reaches a page's callback (typed, or crafted by hand) gets a visible message, never a 500."""
from __future__ import annotations

import json

import pytest


def _post(app, prefix: str, values: dict, state: dict):
    client = app.server.test_client()
    assert client.get("/").status_code == 200                 # Dash registers the callbacks on first use
    key = next(k for k in app.callback_map if k.startswith(f"..{prefix}"))
    cb = app.callback_map[key]
    outputs = [dict(zip(("id", "property"), o.rsplit(".", 1))) for o in key.strip(".").split("...")]
    body = {"output": key, "outputs": outputs,
            "inputs": [dict(i, value=values.get(f"{i['id']}.{i['property']}")) for i in cb["inputs"]],
            "state": [dict(s, value=state.get(f"{s['id']}.{s['property']}")) for s in cb["state"]],
            "changedPropIds": [f"{cb['inputs'][0]['id']}.{cb['inputs'][0]['property']}"]}
    r = client.post("/_dash-update-component", json=body)
    assert r.status_code == 200, r.data[:500]
    return json.dumps(r.get_json())


@pytest.mark.parametrize("values, message", [
    ({"step-range.value": "custom"}, "pick a start date"),
    ({"step-range.value": "custom", "step-from-date.date": "2024-02-30"}, "not a valid date"),
    ({"step-range.value": "custom", "step-from-date.date": "yesterday"}, "is not YYYY-MM-DD"),
    ({"step-range.value": "custom", "step-from-time.value": "12:00"}, "pick a start date for the time"),
    ({"step-range.value": "custom", "step-from-date.date": "2024-01-01", "step-from-time.value": "7pm"},
     "is not HH:MM or HH:MM:SS"),
    ({"step-range.value": "custom", "step-from-date.date": "2024-01-02",
      "step-to-date.date": "2024-01-01"}, "the end must be after the start"),
    ({"step-range.value": "custom", "step-from-date.date": ["2024-01-01"]}, "must be text"),
    ({"step-range.value": ["5m"]}, "unknown range"),
    ({"step-range.value": "1y"}, "unknown range"),
    ({"step-worker.value": "x' OR 1=1 --"}, "must be names"),
    ({"step-pipeline.value": {"$ne": 1}}, "pipeline must be"),
])
def test_step_page_bad_values_are_messages(ui_app, ui_data, values, message):
    text = _post(ui_app, "step-summary", dict({"step-interval.n_intervals": 0}, **values),
                 {"step-key.data": {"run": ui_data.done_run, "step": "sink"}})
    assert message in text and "Traceback" not in text


@pytest.mark.parametrize("state, message", [
    ({"step-key.data": {"run": "a\"b", "step": "sink"}}, "may use only letters"),
    ({"step-key.data": {"run": "done-1", "step": ""}}, "step must be"),
    ({"step-key.data": "done-1"}, "run id must be"),
])
def test_step_page_bad_keys_are_messages(ui_app, ui_data, state, message):
    assert message in _post(ui_app, "step-summary", {"step-interval.n_intervals": 0}, state)


def test_job_page_bad_run_and_range_are_messages(ui_app, ui_data):
    text = _post(ui_app, "job-title", {"job-interval.n_intervals": 0}, {"job-run.data": "r; DROP DATABASE x"})
    assert "run id 'r; DROP DATABASE x' may use only letters" in text
    text = _post(ui_app, "job-title", {"job-interval.n_intervals": 0, "job-range.value": "custom",
                                       "job-from-date.date": "2024-01-01", "job-from-time.value": "24:00"},
                 {"job-run.data": ui_data.done_run})
    assert "is not HH:MM or HH:MM:SS" in text
    # a good custom range of the finished run: its events, no message
    text = _post(ui_app, "job-title", {"job-interval.n_intervals": 0, "job-range.value": "custom",
                                       "job-from-date.date": "2000-01-01"}, {"job-run.data": ui_data.done_run})
    assert f"{ui_data.done_totals['start-to-end']:,} events start-to-end in the range" in text
