"""The project's own InfluxDB: its admin credentials (generated once, kept 0600) and its URL.

`InfluxServer` creates them at its first start with authentication on
(`<state>/influxdb/credentials.json`, mode 0600) and creates the admin user from them;
`InfluxConfig.from_env` reads them back for every project process that talks to that
server without credentials of its own (`MS_INFLUX_USER`/`PASSWORD`/`TOKEN` unset), so
nobody types or sees the password. No I/O beyond this one small file.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from collector.safe_delete import remove_tree

ADMIN_USER = "admin"
FILE_NAME = "credentials.json"
_MAX_BYTES = 4096                        # the file holds two short strings; anything bigger is not ours


@dataclass(frozen=True, repr=False)
class AdminCredentials:
    """User and password of the project server's admin; the password never shows in a repr."""
    user: str
    password: str

    def __repr__(self) -> str:
        return f"AdminCredentials(user={self.user!r}, password='***')"

    __str__ = __repr__


def credentials_path(state_dir: Path | str) -> Path:
    """Return where the project server of `state_dir` keeps its admin credentials."""
    return Path(state_dir) / "influxdb" / FILE_NAME


def running_url(state_dir: Path | str) -> str | None:
    """Return the URL of the state folder's own server if it runs now, else None.

    Its server.json names a pid and a URL; the server is the folder's own only if that pid
    is alive and is `influxd` started with this folder's config file (which fixes the port:
    a stranger that took the port first makes our influxd exit at start). A stale record, a
    recycled pid or anything else listening on the port gets no credential.
    """
    root = Path(state_dir) / "influxdb"
    try:
        info = json.loads((root / "server.json").read_text())
        pid, url = int(info["pid"]), info["url"]
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None
    conf = str((root / "influxdb.conf").resolve()).encode()
    ours = state != "Z" and any(c.endswith(b"influxd") for c in cmd) and conf in cmd
    return url.rstrip("/") if ours and isinstance(url, str) else None


def load_credentials(path: Path | str) -> AdminCredentials | None:
    """Read the credentials file; None if there is none. Raises ValueError if it is not ours.

    A file another user may read is narrowed to 0600 on the way (e.g. restored from a backup).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ValueError(f"cannot read InfluxDB credentials {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES:
            raise ValueError(f"InfluxDB credentials {path} is not a small regular file")
        if st.st_mode & 0o077 and st.st_uid == os.getuid():
            os.fchmod(fd, 0o600)
        raw = os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw)
        user, password = doc["user"], doc["password"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"InfluxDB credentials {path} is not valid (expected JSON with user and password)") \
            from None
    if not (isinstance(user, str) and isinstance(password, str) and user and password):
        raise ValueError(f"InfluxDB credentials {path} has an empty or non-text user or password")
    return AdminCredentials(user, password)


def create_credentials(path: Path | str, user: str = ADMIN_USER) -> AdminCredentials:
    """Return the credentials in `path`, first generating them (random password, mode 0600) if absent.

    Written to a private temporary file and linked into place, so a reader never sees a
    half-written file and two starts racing keep the one that got there first.
    """
    path = Path(path)
    found = load_credentials(path)
    if found is not None:
        return found
    path.parent.mkdir(parents=True, exist_ok=True)
    creds = AdminCredentials(user, secrets.token_urlsafe(24))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps({"user": creds.user, "password": creds.password}).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass                                            # another start won: use its credentials
    finally:
        remove_tree(tmp)
    return load_credentials(path) or creds
