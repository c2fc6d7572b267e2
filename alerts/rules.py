"""Alert rules: a typed `Rule` and the parsing of what users type (pure, no I/O).

A condition reads like the figure it watches: `p99 > 5ms`, `p99.9 >= 250us`,
`throughput < 10k/s`, `backlog > 1M`, `backpressure > 50%`; any Spark query's figures read
as `rows_behind > 1M`, `max(batch_duration) > 30s` or, comparing two figures batch by batch,
`batch_duration > trigger` (`alerts.figures`). Thresholds are kept in base units (latency
ns, throughput events/s, backlog events, backpressure a share 0..1), so comparing a
measured value is one operator. Every parse error is a ValueError whose
message says what was wrong and what would be right: the CLI and the UI show it as is.

>>> parse_condition("p99 > 5ms").threshold
5000000.0
>>> Rule.from_dict({"name": "e2e", "condition": "p99 > 5ms", "for": "30s"}).for_s
30.0
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping
from urllib.parse import urlsplit

from collector.bins import format_ns
from collector.names import check_name, check_tag_value
from collector.run_status import STATUS_FAILED, STATUS_FINISHED, STATUS_LOST, STATUS_STOPPED
from collector.vocabulary import STEP_E2E

from alerts.evaluate import NODATA_KEEP, NODATA_POLICIES
from alerts.figures import AGE, EXECUTOR, FIGURE_NAMES, FIGURES, MOST, check_aggregate, format_value, level_of, \
    parse_threshold

LATENCY, THROUGHPUT, BACKLOG, BACKPRESSURE = "latency", "throughput", "backlog", "backpressure"
FIGURE = "figure"                # a Spark query's generic figure (alerts.figures)
DEFAULT_STEP = STEP_E2E
DEFAULT_WINDOW_S = 60.0
MIN_WINDOW_S, MAX_WINDOW_S = 1.0, 86400.0
MAX_FOR_S = 86400.0
MAX_URL_CHARS = 2000
DEFAULT_SEVERITY = "warning"
SEVERITY_HELP = "critical, warning (default), info, or a name of your routing's (letters, digits and _ . : @ + -)"
MAX_SEVERITY_CHARS = 32

OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}
_LATENCY_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "min": 60e9, "h": 3600e9}
_COUNT_UNITS = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
_CONDITION = re.compile(r"^\s*(?P<metric>[A-Za-z][A-Za-z0-9.]*)\s*(?P<op>>=|<=|>|<)\s*"
                        r"(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*(?P<unit>[^\s]*)\s*$")
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_GENERIC = re.compile(rf"^\s*(?:(?P<agg>[A-Za-z][A-Za-z0-9.]*)\s*\(\s*(?P<inner>{_NAME})\s*\)|(?P<fig>{_NAME}))"
                      rf"\s*(?P<op>>=|<=|>|<)\s*(?:(?P<other>{_NAME})|"
                      r"(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*(?P<unit>[^\s]*(?:\s+rows(?:/s)?)?))\s*$")
_NUMBER_TOKEN = re.compile(r"(?:>=|<=|>|<)\s*(?P<tok>[0-9.,]+(?:[eE][+-]?[0-9]+)?[0-9.,]*)")
_PLAIN_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")
_PERCENTILE = re.compile(r"^p(\d{2}(?:\.\d{1,2})?)$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
CONDITION_HELP = ("a condition like 'p99 > 5ms' (p50..p99.99 with ns/us/ms/s), 'throughput < 10k/s', "
                  "'backlog > 1M' or 'backpressure > 50%'; for a Spark query's figures "
                  "'batch_duration > trigger', 'rows_behind > 1M', 'input_rate > processing_rate', "
                  "'max(batch_duration) > 30s', 'batch_age > 20s' (figures: " + FIGURE_NAMES + "); "
                  "for how a query's newest run ended 'status = failed', 'status = lost' or 'status = failed|lost'")
STATUS = "status"                # how a query's newest run stands (collector.run_status)
ALERTED_STATUSES = (STATUS_FAILED, STATUS_LOST, STATUS_STOPPED, STATUS_FINISHED)
_STATUS = re.compile(r"^\s*status\s*(?:=|==)\s*(?P<set>[a-z]+(?:\s*\|\s*[a-z]+)*)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Condition:
    """A parsed comparison: `metric op threshold`, threshold in the metric's base unit.

    For a generic figure `metric` is its name, `aggregate` the one the user named (None:
    the figure's default), and `against` the second figure of `figure op figure`, whose
    value is the share of batches meeting it and which breaches above `MOST`.
    """
    metric: str                  # "p99", "p99.9", "throughput", "backlog", "backpressure", or a figure
    op: str
    threshold: float
    text: str                    # normalised as the user wrote it, e.g. "p99 > 5ms"
    aggregate: str | None = None
    against: str | None = None
    statuses: tuple[str, ...] = ()      # a STATUS condition's run statuses

    @property
    def kind(self) -> str:
        """Return LATENCY, THROUGHPUT, BACKLOG, BACKPRESSURE, FIGURE or STATUS."""
        if self.metric == STATUS:
            return STATUS
        if self.metric in FIGURES:
            return FIGURE
        return LATENCY if self.metric.startswith("p") else self.metric

    @property
    def figure(self) -> str | None:
        """Return the catalogue figure the condition reads (`latency` for p99 ...); None for a run's status."""
        kind = self.kind
        return None if kind == STATUS else "latency" if kind == LATENCY else self.metric

    @property
    def percentile(self) -> float | None:
        """Return the percentile of a latency condition (99.9 for p99.9), else None."""
        return float(self.metric[1:]) if self.kind == LATENCY else None

    def breached(self, value: float | None) -> bool:
        """Return whether a measured value meets the condition; no data never does (as Prometheus)."""
        if self.against is not None or self.kind == STATUS:
            return value is not None and value > MOST
        return value is not None and OPS[self.op](value, self.threshold)

    def format_value(self, value: float | None) -> str:
        """Return a measured value in the condition's terms ("4.2 ms", "12,345 events/s")."""
        if value is None:
            return "no data"
        if self.kind == STATUS:
            return "|".join(self.statuses) if value > MOST else "not " + "|".join(self.statuses)
        if self.against is not None:
            return f"{100 * value:.0f} % of batches"
        if self.kind == FIGURE:
            return format_value(FIGURES[self.metric], value)
        if self.kind == LATENCY:
            return format_ns(value)
        if self.kind == THROUGHPUT:
            return f"{value:,.0f} events/s"
        if self.kind == BACKLOG:
            return f"{value:,.0f} events"
        return f"{100 * value:.1f} %"

    def __str__(self) -> str:
        return self.text


def parse_condition(text: str) -> Condition:
    """Parse `p99 > 5ms`-style text into a Condition; raise ValueError with a reason."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"condition is empty: expected {CONDITION_HELP}")
    if len(text) > 100:
        raise ValueError("condition is longer than 100 characters")
    st = _STATUS.match(text)
    if st or text.strip().lower().startswith("status"):
        return _parse_status_condition(text, st)
    _check_number(text)
    g = _GENERIC.match(text)
    if g and (g["agg"] or g["other"] or "_" in g["fig"] or g["fig"].lower() in FIGURES):
        return _parse_figure_condition(g)
    m = _CONDITION.match(text)
    if not m:
        raise ValueError(f"condition {text.strip()[:60]!r} is not understood: expected {CONDITION_HELP}")
    metric, op, num, unit = m["metric"].lower(), m["op"], float(m["num"]), m["unit"]
    pm = _PERCENTILE.match(metric)
    if pm:
        p = float(pm[1])
        if not 50.0 <= p <= 99.99:
            raise ValueError(f"percentile {metric} is outside p50..p99.99")
        if unit not in _LATENCY_UNITS:
            raise ValueError(f"latency threshold {num:g}{unit} needs a unit: ns, us (or µs), ms or s")
        threshold = num * _LATENCY_UNITS[unit]
    elif metric in (THROUGHPUT, BACKLOG):
        base = unit
        if metric == THROUGHPUT:
            for suffix in ("events/s", "/s", "eps"):
                if base.endswith(suffix):
                    base = base[: -len(suffix)]
                    break
        elif base.endswith("events"):
            base = base[: -len("events")]
        if base not in _COUNT_UNITS:
            example = "10k/s" if metric == THROUGHPUT else "1M"
            raise ValueError(f"{metric} threshold {num:g}{unit} has an unknown unit: use k or M (e.g. {example})")
        threshold = num * _COUNT_UNITS[base]
    elif metric == BACKPRESSURE:
        if unit == "%":
            threshold = num / 100.0
        elif unit == "":
            threshold = num
        else:
            raise ValueError(f"backpressure threshold {num:g}{unit} must be a share: 0..1 or 0..100%")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"backpressure threshold {num:g}{unit} is outside 0..100%")
    else:
        raise ValueError(f"metric {metric!r} is unknown: use p50..p99.99, throughput, backlog, backpressure "
                         f"or a Spark query's figure ({FIGURE_NAMES})")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold {num}{unit} is not a finite number")
    return Condition(metric, op, threshold, f"{metric} {op} {m['num']}{unit}")


def _check_number(text: str) -> None:
    """Raise ValueError naming a malformed threshold number (`5.5.5ms`, `1e3ms`), before any unit is blamed."""
    m = _NUMBER_TOKEN.search(text)
    if m and not _PLAIN_NUMBER.fullmatch(m["tok"]):
        raise ValueError(f"threshold {m['tok']!r} is not a number: write digits with at most one decimal "
                         "point, no exponent and no thousands separator, then the unit (e.g. 5.5ms, 10k/s, 1M)")


def _parse_status_condition(text: str, m: re.Match | None) -> Condition:
    """Parse `status = failed|lost`: breached while a query's newest run stands so (value 1, else 0)."""
    wanted = ", ".join(ALERTED_STATUSES)
    if m is None:
        raise ValueError(f"condition {text.strip()[:60]!r} is not understood: write status = failed, "
                         f"status = lost or status = failed|lost (statuses: {wanted})")
    statuses = tuple(dict.fromkeys(x.strip().lower() for x in m["set"].split("|")))
    unknown = [x for x in statuses if x not in ALERTED_STATUSES]
    if unknown:
        raise ValueError(f"status {unknown[0]!r} is unknown: use {wanted}, several joined by |")
    return Condition(STATUS, "=", MOST, f"status = {'|'.join(statuses)}", statuses=statuses)


def _parse_figure_condition(g: re.Match) -> Condition:
    """Parse `[agg(]figure[)] op threshold` or `figure op figure` (alerts.figures)."""
    name, op = (g["inner"] or g["fig"]).lower(), g["op"]
    unknown = f"use {FIGURE_NAMES} (or p50..p99.99, throughput, backlog, backpressure)"
    if name not in FIGURES:
        raise ValueError(f"figure {name!r} is unknown: {unknown}")
    figure = FIGURES[name]
    agg = None if g["agg"] is None else check_aggregate(g["agg"].lower(), figure)
    left = name if agg is None else f"{agg}({name})"
    if g["other"] is not None:
        other = g["other"].lower()
        if other not in FIGURES:
            raise ValueError(f"figure {other!r} is unknown: {unknown}")
        if agg is not None:
            raise ValueError(f"{left} {op} {other}: two figures are compared batch by batch, "
                             f"so write them without an aggregate ({name} {op} {other})")
        if other == name:
            raise ValueError(f"{name} {op} {other} compares a figure with itself")
        if AGE in (figure.aggregate, FIGURES[other].aggregate):
            raise ValueError(f"{name} {op} {other}: batch_age is read as it stands now, not batch by batch: "
                             "compare it with a threshold (batch_age > 20s)")
        if FIGURES[other].unit != figure.unit:
            raise ValueError(f"{name} {op} {other} compares a {figure.unit} with a {FIGURES[other].unit}: "
                             "compare figures of the same unit")
        return Condition(name, op, MOST, f"{name} {op} {other}", None, other)
    threshold = parse_threshold(figure, float(g["num"]), g["unit"])
    if not math.isfinite(threshold):
        raise ValueError(f"threshold {g['num']}{g['unit']} is not a finite number")
    return Condition(name, op, threshold, f"{left} {op} {g['num']}{g['unit']}", agg)


def parse_duration(value: Any, what: str) -> float:
    """Parse `30s`, `500ms`, `5m`, `1h` or a number of seconds into seconds; raise ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"{what} {value!r} is not a duration like 30s, 5m or 1h")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value)) if value is not None else None
        if not m:
            raise ValueError(f"{what} {str(value)[:40]!r} is not a duration like 30s, 500ms, 5m or 1h")
        seconds = float(m[1]) * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m[2] or "s"]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be zero or more seconds")
    return seconds


def format_duration(seconds: float) -> str:
    """Return seconds as the shortest of `1h`, `5m`, `30s`, `500ms`."""
    for unit, scale in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= scale and float(seconds / scale).is_integer():
            return f"{int(seconds / scale)}{unit}"
    if seconds and float(seconds * 1000).is_integer() and seconds < 1:
        return f"{int(seconds * 1000)}ms"
    return f"{seconds:g}s"


def check_webhook(url: str, what: str = "webhook URL") -> str:
    """Return a webhook URL (or the `what` URL) if it is http(s)://host...; raise ValueError otherwise."""
    url = url.strip() if isinstance(url, str) else url
    if not isinstance(url, str) or not url:
        raise ValueError(f"{what} is empty")
    if len(url) > MAX_URL_CHARS or any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise ValueError(f"{what} must be at most {MAX_URL_CHARS} characters without spaces")
    try:
        parts = urlsplit(url)
        parts.port                                       # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ValueError(f"{what} is malformed: {e}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError(f"{what} must start with http:// or https:// (got {parts.scheme or 'no'} scheme)")
    if not parts.hostname:
        raise ValueError(f"{what} has no host")
    return url


def check_severity(value: Any) -> str:
    """Return a severity (a label Alertmanager routes on) if it is a short safe name; raise ValueError."""
    severity = check_name(value, "severity")
    if len(severity) > MAX_SEVERITY_CHARS:
        raise ValueError(f"severity is {len(severity)} characters long; at most {MAX_SEVERITY_CHARS} are allowed")
    return severity


def redact_url(url: str | None) -> str:
    """Return a webhook URL for display: scheme, host, port and path (no credentials, no query)."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return f"{parts.scheme}://{netloc}{parts.path}" + ("?…" if parts.query else "")


def _optional(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and not value.strip()) else value


@dataclass(frozen=True)
class Rule:
    """One alert rule: a condition on a scope's metric over a window, held `for_s` before firing.

    Scope: `job` is the run (None: any run writing in the window), `step` the step
    (latency and throughput), `pipeline` and `worker` narrow it (None: all). Backlog and
    backpressure are the job's own figures, so they take no pipeline, step or worker. A
    Spark query's figure takes no step either: `job` (its run), `query`, and `source` or
    `operator` narrow it; an executor's figure (heap_used, gc_time) takes `app` and `executor`.
    """
    name: str
    condition: Condition
    step: str | None = DEFAULT_STEP
    pipeline: str | None = None
    worker: str | None = None
    job: str | None = None
    window_s: float = DEFAULT_WINDOW_S
    for_s: float = 0.0
    webhook: str | None = None
    muted: bool = False
    query: str | None = None
    source: str | None = None
    operator: str | None = None
    app: str | None = None
    executor: str | None = None
    nodata: str = NODATA_KEEP
    severity: str = DEFAULT_SEVERITY

    KEYS = ("name", "condition", "job", "pipeline", "step", "worker", "query", "source", "operator", "app",
            "executor", "window", "for", "webhook", "muted", "nodata", "severity")
    FIGURE_SCOPE = ("query", "source", "operator", "app", "executor")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Rule":
        """Build and validate a rule from a mapping (YAML, JSON, form); raise ValueError."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a rule must be a mapping of {', '.join(cls.KEYS)}")
        name = d.get("name")
        label = f"rule {str(name)[:40]!r}" if isinstance(name, str) and name else "rule"
        try:
            unknown = sorted(str(k) for k in d if k not in cls.KEYS)
            if unknown:
                raise ValueError(f"unknown key(s) {', '.join(unknown)}; a rule has {', '.join(cls.KEYS)}")
            name = check_name(name, "name")
            cond = parse_condition(d.get("condition", ""))
            job_only = cond.kind in (BACKLOG, BACKPRESSURE)
            step = _optional(d.get("step"))
            pipeline, worker, job = (_optional(d.get(k)) for k in ("pipeline", "worker", "job"))
            scope = {k: _optional(d.get(k)) for k in cls.FIGURE_SCOPE}
            if cond.kind == FIGURE:
                scope = _figure_scope(cond, step, pipeline, worker, job, scope)
                step = None
            elif cond.kind == STATUS:
                given = {"step": step, "pipeline": pipeline, "worker": worker, **scope}
                named = [k for k, v in given.items() if v is not None and k != "query"]
                if named:
                    raise ValueError(f"status is how a query's run ended: scope it with job and query, "
                                     f"not {', '.join(named)}")
                scope["query"] = None if scope["query"] is None else check_tag_value(scope["query"], "query")
                step = None
            elif any(v is not None for v in scope.values()):
                given = ", ".join(k for k, v in scope.items() if v is not None)
                raise ValueError(f"{given} scope a Spark query's figures (e.g. rows_behind), not {cond.kind}")
            elif job_only:
                if pipeline or worker or (step and step != "job"):
                    raise ValueError(f"{cond.kind} is a figure of the whole job: leave step, pipeline and worker empty")
                step = None
            else:
                step = check_tag_value(step or DEFAULT_STEP, "step")
                pipeline = None if pipeline is None else check_tag_value(pipeline, "pipeline")
                worker = None if worker is None else check_tag_value(worker, "worker")
            job = None if job is None else check_name(job, "job (run)")
            window = parse_duration(d.get("window", DEFAULT_WINDOW_S), "window")
            if not MIN_WINDOW_S <= window <= MAX_WINDOW_S:
                raise ValueError("window must be between 1s and 24h")
            hold = parse_duration(d.get("for", 0) if _optional(d.get("for")) is not None else 0, "for")
            if hold > MAX_FOR_S:
                raise ValueError("for must be at most 24h")
            webhook = _optional(d.get("webhook"))
            webhook = None if webhook is None else check_webhook(webhook)
            muted = d.get("muted", False)
            if not isinstance(muted, bool):
                raise ValueError("muted must be true or false")
            nodata = _optional(d.get("nodata")) or NODATA_KEEP
            if nodata not in NODATA_POLICIES:
                raise ValueError(f"nodata {str(nodata)[:20]!r} is unknown: use {', '.join(NODATA_POLICIES)} "
                                 "(what a rule does while its scope reports nothing)")
            severity = check_severity(_optional(d.get("severity")) or DEFAULT_SEVERITY)
        except ValueError as e:
            raise ValueError(f"{label}: {e}") from None
        return cls(name, cond, step, pipeline, worker, job, window, hold, webhook, muted, **scope, nodata=nodata,
                   severity=severity)

    def to_dict(self) -> dict[str, Any]:
        """Return the rule as the rules file and YAML hold it (durations as text)."""
        d: dict[str, Any] = {"name": self.name, "condition": self.condition.text}
        for key in ("job", "pipeline", "step", "worker") + self.FIGURE_SCOPE:
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        d["window"] = format_duration(self.window_s)
        d["for"] = format_duration(self.for_s)
        if self.webhook:
            d["webhook"] = self.webhook
        d["muted"] = self.muted
        if self.nodata != NODATA_KEEP:
            d["nodata"] = self.nodata
        if self.severity != DEFAULT_SEVERITY:
            d["severity"] = self.severity
        return d

    def with_muted(self, muted: bool) -> "Rule":
        """Return the rule muted (evaluated and recorded, no notification, no banner) or not."""
        return replace(self, muted=muted)

    def scope_text(self) -> str:
        """Return the scope for display, e.g. `job r1 · orders · start-to-end · host/p0`."""
        if self.condition.kind == FIGURE and EXECUTOR in FIGURES[self.condition.metric].fields:
            parts = [f"app {self.app}" if self.app else "any app"]
        else:
            parts = [f"job {self.job}" if self.job else "any job"]
        parts += [p for p in (self.pipeline, self.step, self.worker) if p]
        parts += [f"{k} {getattr(self, k)}" for k in self.FIGURE_SCOPE if k != "app" and getattr(self, k)]
        return " · ".join(parts)

    def summary(self) -> str:
        """Return one line: scope, condition, window and pending period."""
        hold = f" for {format_duration(self.for_s)}" if self.for_s else ""
        return f"{self.scope_text()}: {self.condition.text} over {format_duration(self.window_s)}{hold}"


def _figure_scope(cond: Condition, step, pipeline, worker, job, scope: dict) -> dict:
    """Return the checked query/source/operator/app/executor scope of a generic figure; raise ValueError."""
    if step is not None or pipeline is not None or worker is not None:
        raise ValueError(f"{cond.metric} is a figure of a Spark query: leave step, pipeline and worker empty "
                         "(scope it with job, query, and source or operator)")
    figure = FIGURES[cond.metric]
    if EXECUTOR in figure.fields:
        named = [k for k in ("query", "source", "operator") if scope[k] is not None] + (["job"] if job else [])
        if named:
            raise ValueError(f"{cond.metric} is a figure of an executor: scope it with app and executor, "
                             f"not {', '.join(named)}")
    else:
        named = [k for k in ("app", "executor") if scope[k] is not None]
        if named:
            execs = ", ".join(f.name for f in FIGURES.values() if EXECUTOR in f.fields)
            raise ValueError(f"{', '.join(named)} scope an executor's figures ({execs}), not {cond.metric}")
        level = level_of(figure, scope["source"], scope["operator"])
        if cond.against is not None:
            other = level_of(FIGURES[cond.against], scope["source"], scope["operator"])
            if other != level:
                raise ValueError(f"{cond.text}: {cond.metric} is read per {level} here and {cond.against} "
                                 f"per {other}; compare figures written together")
    return {k: None if v is None else check_tag_value(v, k) for k, v in scope.items()}
