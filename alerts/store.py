"""Where rules persist: one JSON file in the state folder, shared by CLI, UI and evaluator.

`<state>/alerts/rules.json` (`MS_STATE_DIR`, default `.state/`; `MS_ALERTS_FILE`
overrides the path). Every change is a read-modify-write under an exclusive lock file and
lands by an atomic rename, so a CLI edit, a UI edit and the evaluator's reads never see
half a file. YAML (or JSON) rule files are read by `read_rules_file` for `alerts load`.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from alerts.namespace import load_namespace
from alerts.rules import Rule

FILE_VERSION = 1
MAX_RULES = 1000                       # rules.json stays small, a cycle's queries bounded
MAX_RULES_FILE_BYTES = 1 << 20         # `alerts load`: 1 MiB
MAX_YAML_DEPTH = 20                    # a rules file nests 3 levels; this refuses a deep-nesting bomb


def parse_rules(doc: Any, source: str) -> list[Rule]:
    """Return the rules of a loaded document: `{rules: [...]}` or a bare list; raise ValueError."""
    if isinstance(doc, dict) and "rules" in doc:
        doc = doc["rules"]
    if doc is None:
        return []
    if not isinstance(doc, list):
        raise ValueError(f"{source}: expected a list of rules (or a mapping with a 'rules' list)")
    if len(doc) > MAX_RULES:
        raise ValueError(f"{source}: {len(doc)} rules; at most {MAX_RULES} are allowed")
    rules, seen = [], set()
    for i, item in enumerate(doc, 1):
        try:
            rule = Rule.from_dict(item)
        except ValueError as e:
            raise ValueError(f"{source}: rule #{i}: {e}") from None
        if rule.name in seen:
            raise ValueError(f"{source}: rule name {rule.name!r} appears twice")
        seen.add(rule.name)
        rules.append(rule)
    return rules


def _check_yaml_shape(text: str, source: str) -> None:
    """Refuse anchors, aliases and deep nesting from the parser's events, before any object is built.

    An alias makes a 500-byte file expand to gigabytes when loaded ("billion laughs"); a
    rules file has no use for one. Events cost time linear in the text, so this is cheap.
    """
    import yaml  # lazy: PyYAML loads only for `alerts load`, not for every rules read
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            mark = event.start_mark
            raise ValueError(f"{source} uses a YAML anchor or alias (& or *) at line {mark.line + 1}: "
                             "rules files may not; write each rule out")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise ValueError(f"{source} nests more than {MAX_YAML_DEPTH} levels deep at line "
                                 f"{event.start_mark.line + 1}: not a rules file")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _unique_key_loader(yaml, source: str):
    """A SafeLoader that refuses a mapping naming a key twice (the later one would win silently)."""
    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:            # an unhashable key: the base class says why
                    break
                if duplicate:
                    raise ValueError(f"{source} has a duplicate key {str(key)[:60]!r} at line "
                                     f"{key_node.start_mark.line + 1}: each key once per rule")
            return super().construct_mapping(node, deep)
    return UniqueKeyLoader


def read_rules_file(path: Path, max_bytes: int = MAX_RULES_FILE_BYTES) -> list[Rule]:
    """Read rules from a YAML or JSON file (`alerts load`); raise ValueError with the reason.

    The file is bounded before it is parsed: at most `max_bytes`, no anchors or aliases,
    at most `MAX_YAML_DEPTH` levels of nesting.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise ValueError(f"rules file {path} is larger than {max_bytes:,} bytes: not a rules file")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"rules file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read rules file {path}: {e}") from None
    import yaml  # lazy: as above; JSON is YAML too
    try:
        _check_yaml_shape(text, str(path))
        doc = yaml.load(text, Loader=_unique_key_loader(yaml, str(path)))       # a SafeLoader
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise ValueError(f"{path} is not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    return parse_rules(doc, str(path))


class RuleStore:
    """The rules file: list, add or replace, remove, mute; each call reads the file afresh.

    >>> store = RuleStore(AlertSettings.from_env().rules_path)     # alerts.settings
    >>> store.put(Rule.from_dict({"name": "e2e", "condition": "p99 > 5ms"}))
    >>> [r.name for r in store.rules()]
    ['e2e']
    """

    def __init__(self, path: Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RuleStore({str(self.path)!r})"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def rules(self) -> list[Rule]:
        """Return every rule in file order (none if the file does not exist yet)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise ValueError(f"rules file {self.path} is damaged ({e}); fix or remove it") from None
        return parse_rules(doc, str(self.path))

    def get(self, name: str) -> Rule | None:
        """Return the rule called `name`, None if there is none."""
        return next((r for r in self.rules() if r.name == name), None)

    def _write(self, rules: list[Rule]) -> None:
        if len(rules) > MAX_RULES:
            raise ValueError(f"at most {MAX_RULES} rules are allowed; remove some first")
        load_namespace(self.path)        # before a first rules file: a new folder owns no untagged history
        tmp = self.path.with_name(self.path.name + ".tmp")
        doc = {"version": FILE_VERSION, "rules": [r.to_dict() for r in rules]}
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def put(self, rule: Rule, replace: bool = True) -> bool:
        """Add a rule or (with `replace`) replace the one of the same name; return whether it was new."""
        with self._locked():
            rules = self.rules()
            names = [r.name for r in rules]
            if rule.name in names:
                if not replace:
                    raise ValueError(f"rule {rule.name!r} exists already (use --replace to change it)")
                rules[names.index(rule.name)] = rule
            else:
                rules.append(rule)
            self._write(rules)
            return rule.name not in names

    def put_all(self, new: list[Rule]) -> tuple[int, int]:
        """Add or replace several rules at once; return (added, replaced)."""
        with self._locked():
            rules = self.rules()
            index = {r.name: i for i, r in enumerate(rules)}
            added = replaced = 0
            for rule in new:
                if rule.name in index:
                    rules[index[rule.name]] = rule
                    replaced += 1
                else:
                    index[rule.name] = len(rules)
                    rules.append(rule)
                    added += 1
            self._write(rules)
            return added, replaced

    def remove(self, name: str) -> None:
        """Delete a rule; raise ValueError if there is none of that name."""
        with self._locked():
            rules = self.rules()
            if not any(r.name == name for r in rules):
                raise ValueError(f"no rule called {name!r}")
            self._write([r for r in rules if r.name != name])

    def set_muted(self, name: str, muted: bool) -> Rule:
        """Mute or unmute a rule; return it."""
        with self._locked():
            rules = self.rules()
            for i, r in enumerate(rules):
                if r.name == name:
                    rules[i] = r.with_muted(muted)
                    self._write(rules)
                    return rules[i]
            raise ValueError(f"no rule called {name!r}")
