"""Shared fixtures: the Wallaroo fixtures folder and one local Spark session per test run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "data" / "wallaroo-market-spread"
if not FIXTURES.is_dir():
    FIXTURES = Path(os.environ.get("MS_FIXTURES", "/work/shared/data/wallaroo-market-spread"))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """Folder of Wallaroo's Market Spread fixtures (../shared/data/...)."""
    assert FIXTURES.is_dir(), f"Wallaroo fixtures not found at {FIXTURES}"
    return FIXTURES


@pytest.fixture(scope="session")
def spark():
    """One real local Spark session (local[2]) for the whole test run."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from engine.spark_session import build_session
    session = build_session("local[2]", app_name="market-spread-tests", shards=2)
    yield session
    session.stop()
