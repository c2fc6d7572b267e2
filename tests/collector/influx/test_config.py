"""InfluxConfig: from `MS_INFLUX_*` variables, credentials out of the URL and out of every repr."""
from __future__ import annotations

import pytest

from collector.influx import InfluxClient, InfluxConfig
from tests.collector.influx.helpers import SECRET_PW, SECRET_TOKEN


def test_config_from_env_and_redaction():
    cfg = InfluxConfig.from_env({"MS_INFLUX_URL": f"http://bob:{SECRET_PW}@db.example:8086/influx",
                                 "MS_INFLUX_DB": "metrics", "MS_INFLUX_TOKEN": SECRET_TOKEN,
                                 "MS_INFLUX_TIMEOUT": "2.5"})
    assert cfg.url == "http://db.example:8086/influx"
    assert (cfg.db, cfg.user, cfg.password, cfg.token, cfg.timeout) == ("metrics", "bob", SECRET_PW, SECRET_TOKEN, 2.5)
    for text in (repr(cfg), str(cfg), repr(InfluxClient(cfg)), f"{cfg}"):
        assert SECRET_PW not in text and SECRET_TOKEN not in text
    assert InfluxConfig.from_env({}).url == "http://127.0.0.1:18086"
    with pytest.raises(ValueError, match="MS_INFLUX_TIMEOUT"):
        InfluxConfig.from_env({"MS_INFLUX_TIMEOUT": "soon"})


def test_config_env_empty_is_unset_and_errors_name_the_variable(tmp_path):
    env = {"MS_STATE_DIR": str(tmp_path), "MS_INFLUX_DB": "", "MS_INFLUX_USER": "", "MS_INFLUX_SPOOL_BYTES": "4096"}
    cfg = InfluxConfig.from_env(env)
    assert (cfg.db, cfg.user, cfg.spool_max_bytes) == ("marketspread", None, 4096)
    assert InfluxConfig.from_env(env, db="other", user=None).db == "other"       # overrides win, None ignored
    with pytest.raises(ValueError, match="MS_INFLUX_SPOOL_BYTES='lots' is not a valid int"):
        InfluxConfig.from_env({"MS_INFLUX_SPOOL_BYTES": "lots"})


def test_flush_seconds_from_env_and_bounded(tmp_path):
    """How often a process' writer sends: 1 s by default; a value that would never send is refused."""
    env = {"MS_STATE_DIR": str(tmp_path)}
    assert InfluxConfig.from_env(env).flush_s == 1.0
    assert InfluxConfig.from_env({**env, "MS_INFLUX_FLUSH_S": "0.25"}).flush_s == 0.25
    for bad in ("-1", "nan", "1e9"):
        with pytest.raises(ValueError, match="MS_INFLUX_FLUSH_S"):
            InfluxConfig.from_env({**env, "MS_INFLUX_FLUSH_S": bad})


def test_open_writer_sends_at_the_configured_rhythm(tmp_path, monkeypatch):
    from marketspread.metrics_wiring import open_writer
    monkeypatch.setenv("MS_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("MS_INFLUX_FLUSH_S", "2.5")
    w = open_writer(tmp_path, "t", InfluxConfig.from_env())      # as an entry point builds it
    try:
        assert w.interval == 2.5
    finally:
        w.close(timeout=0.1)
