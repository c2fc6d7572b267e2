"""The one settings layer: `MS_*` environment variables into typed config records.

Every part's settings are a frozen dataclass (engine `Config`, `InfluxConfig`, the alerts'
`AlertSettings`, the UI's `UiConfig`, ...). Entry points build them once, from defaults,
then the environment through `env_values`, then command-line flags, and pass the records
down (the dashboard keeps its own on the Flask app, as Flask keeps `app.config`). This
module is the only reader of `os.environ`, and its functions given no mapping read it:
only entry points and the records' `from_env` builders call them so
(`tests/test_environment_reads.py`). Nothing writes the environment to pass settings on:
child processes get an `env=` mapping (`child_environment`).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def environment(environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """Return `environ`, or this process's environment when None: the project's one read of it.

    Only this module calls it; other modules read through `env_values`, `prefixed_env` and
    `default_state_dir`, whose optional mapping lets tests hand builders their own.
    """
    return os.environ if environ is None else environ


def prefixed_env(prefix: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the variables of `environ` (None: this process's environment) named `prefix...`, as set.

    For builders that read their variables themselves (Flask's `from_prefixed_env`): an
    empty value stays empty, so each builder keeps its own reading of one.
    """
    return {k: v for k, v in environment(environ).items() if k.startswith(prefix)}


def env_is_set(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Return whether variable `name` is set to a non-empty value (None: this process's environment)."""
    return bool(environment(environ).get(name))


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the environment of a child process: this process's, plus `extra`."""
    return {**os.environ, **(extra or {})}


def spark_local_ip(environ: Mapping[str, str] | None = None) -> str | None:
    """Return `SPARK_LOCAL_IP`, Spark's own variable: the driver address the user chose, if any."""
    return environment(environ).get("SPARK_LOCAL_IP") or None


def spark_launch_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return Spark's own launch variables the user set (`SPARK_LOCAL_IP`, `PYSPARK_SUBMIT_ARGS`)."""
    env = environment(environ)
    return {k: env[k] for k in ("SPARK_LOCAL_IP", "PYSPARK_SUBMIT_ARGS") if env.get(k)}


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Return the state folder: `$MS_STATE_DIR`, else `.state/` of this checkout.

    The ingress log, results, checkpoints, the project InfluxDB and the alert rules all
    live under it, so one variable moves a whole instance.
    """
    return Path(environment(environ).get("MS_STATE_DIR") or PROJECT_ROOT / ".state")


def parse_value(typ: Any, raw: str, var: str) -> Any:
    """Return `raw` as `typ` (int, float, bool, Path or str); ValueError names the variable."""
    t = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    t = t.replace(" | None", "").replace("Optional[", "").rstrip("]")
    try:
        if t == "int":
            return int(raw)
        if t == "float":
            return float(raw)
        if t == "bool":
            if raw.lower() in _TRUE:
                return True
            if raw.lower() in _FALSE:
                return False
            raise ValueError(raw)
        if t == "Path":
            return Path(raw)
        return raw
    except ValueError:
        raise ValueError(f"{var}={raw!r} is not a valid {t}") from None


def env_values(cls: type, environ: Mapping[str, str] | None = None, prefix: str = "MS_",
               names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return the typed values the environment sets for the fields of dataclass `cls`.

    Field `foo` is read from `<prefix>FOO` unless `names` maps it to another suffix; an
    empty variable counts as unset, as in a shell's `MS_X= command`. `environ` None: this
    process's environment.
    """
    environ = environment(environ)
    names = names or {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        var = prefix + names.get(f.name, f.name.upper())
        raw = environ.get(var)
        if raw:
            values[f.name] = parse_value(f.type, raw, var)
    return values
