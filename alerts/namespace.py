"""Which alert history is a rules folder's own: a namespace id kept beside its rules.

Several state folders (the main one, a bench job's, a test's) write alert history to the
same InfluxDB database. Each rules folder (`<state>/alerts/`, or the folder of
`MS_ALERTS_FILE`) gets a random id, created once in `namespace.json` and then kept; it
is the `namespace` tag of every `alert_events` and `alert_notifications` point that
folder's evaluator writes, and the only history its restore, `alerts list`, the Alerts
page and the banner read. So an evaluator never reads, closes or resolves another
folder's rules, whatever their names.

Points written before namespaces existed carry no tag. They belong to the folder that
already had a rules file when its namespace was created (`legacy`: it is the folder
whose evaluator wrote them); a folder created since never reads them. A copied state
folder shares its namespace: remove `alerts/namespace.json` in the copy to give it its own
(recreated with `"legacy": true`, as the copy has rules: set it to false by hand if the
copy should not read the history from before namespaces either).
"""
from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from collector.safe_delete import remove_tree

NAMESPACE_FILE = "namespace.json"
_ID_CHARS = 16                     # hex digits: 64 random bits, no collision between folders


@dataclass(frozen=True)
class AlertNamespace:
    """A rules folder's share of the alert history: its id, and whether untagged points are its own."""
    id: str
    legacy: bool = False


def namespace_path(rules_path: Path) -> Path:
    """Return where the namespace of a rules file is kept (beside it)."""
    return Path(rules_path).with_name(NAMESPACE_FILE)


def _read(path: Path) -> AlertNamespace:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        ns = AlertNamespace(str(doc["id"]), bool(doc.get("legacy", False)))
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"alert namespace file {path} is damaged ({e}); remove it to start a new "
                         "alert history for this folder") from None
    if not ns.id.isalnum() or len(ns.id) > 64:
        raise ValueError(f"alert namespace file {path} holds a bad id {ns.id[:70]!r}; remove it")
    return ns


def load_namespace(rules_path: Path) -> AlertNamespace:
    """Return the namespace of a rules file's folder, creating it on first use (race-free).

    Raise ValueError, saying why, if it can be neither read nor created.
    """
    path = namespace_path(rules_path)
    try:
        try:
            return _read(path)
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        # A rules file older than its namespace: this folder's evaluator wrote the untagged history.
        ns = AlertNamespace(secrets.token_hex(_ID_CHARS // 2), legacy=Path(rules_path).exists())
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"id": ns.id, "legacy": ns.legacy}) + "\n", encoding="utf-8")
        try:
            os.link(tmp, path)     # fails if another process created it first: theirs wins
        except FileExistsError:
            return _read(path)
        finally:
            remove_tree(tmp)
        return ns
    except OSError as e:
        raise ValueError(f"cannot read or create the alert namespace {path}: {e.strerror or e}") from None
