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


def setting(default: Any, help: str, *, flag: str | None = None, group: str = "common",
            metavar: str | None = None) -> Any:
    """Declare a field of a settings record with its command-line flag (`add_setting_flags`).

    The flag is `--field-name`, a boolean's the switch away from its default (`--no-x` for
    x=True) unless `flag` spells it; `group` says which commands take it.
    """
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "group": group,
                                                        "metavar": metavar})


@dataclasses.dataclass(frozen=True)
class Flag:
    """One settings field's command-line flag, as `setting` declared it."""
    name: str
    option: str
    help: str
    group: str
    type: str
    default: Any
    metavar: str | None


def setting_flags(cls: type) -> list[Flag]:
    """Return the flags of the fields of dataclass `cls` declared with `setting`, in field order."""
    out = []
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue
        typ = (f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))).replace(" | None", "")
        dashed = f.name.replace("_", "-")
        option = f.metadata["flag"] or (f"--no-{dashed}" if typ == "bool" and f.default else f"--{dashed}")
        out.append(Flag(f.name, option, f.metadata["help"], f.metadata["group"], typ, f.default,
                        f.metadata["metavar"]))
    return out


def shown(value: Any, name: str = "") -> str:
    """Return a default as a flag's help shows it: on/off, sizes of `*_bytes` fields in binary units too."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, int) and name.endswith("_bytes") and value >= 1024 and value % 1024 == 0:
        n, unit = value, ""
        for unit in ("KiB", "MiB", "GiB", "TiB"):
            n //= 1024
            if n < 1024 or n % 1024:
                break
        return f"{value} ({n} {unit})"
    return str(value)


def add_setting_flags(container: Any, cls: type, *, group: str | None = None, names: tuple[str, ...] = (),
                      defaults: Any = None, help: Mapping[str, str] | None = None, prefix: str = "MS_") -> None:
    """Add to argparse `container` the flags of `cls`'s fields of `group` (or those `names`).

    Each flag's help ends with its variable and the default of `defaults` (a record of `cls`,
    e.g. one built from no environment; None: the declared ones). A flag not given parses to
    None, so the environment, then the default, decides (`from_env` overrides).
    """
    types = {"int": int, "float": float, "Path": Path}
    for fl in setting_flags(cls):
        if (names and fl.name not in names) or (not names and fl.group != group):
            continue
        default = getattr(defaults, fl.name) if defaults is not None else fl.default
        text = f"{(help or {}).get(fl.name, fl.help)} [{prefix}{fl.name.upper()}, default {shown(default, fl.name)}]"
        text = text.replace("%", "%%")                       # argparse formats help with %
        if fl.type == "bool":
            container.add_argument(fl.option, dest=fl.name, action="store_const", const=not fl.default, help=text)
        else:
            container.add_argument(fl.option, dest=fl.name, type=types.get(fl.type), metavar=fl.metavar, help=text)
