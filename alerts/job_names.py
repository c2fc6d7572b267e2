"""Check a rule's job against the jobs the metrics know, and note the figures a job never reported.

A rule whose `job` (the `run` tag) no data knows, a typo or a renamed query, matches
nothing, and as no data never fires it would stay OK for ever. So `alerts add`, `alerts
load` and the Alerts page refuse it, listing the known jobs newest first, unless the
user says the job has not run yet (`--new-job`): then it is accepted with a note. A
figure the job has never reported (`p99` of a query without latency steps, `state_rows`
of one without a stateful operator) may still come, so it gets a note, never a refusal.
Which points a figure needs comes from where the catalogue says it is written
(`collector.catalogue.LEVELS`).

`check_job`, `needs` and `missing_note` are pure; `known_jobs` and `has_data` ask the
backend's reader (`MetricsReader.known_jobs`, `has_data`).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from collector.catalogue import FIGURES as CATALOGUE, JOB, STEPS
from collector.metrics.backend import MetricsReader
from collector.vocabulary import BACKPRESSURE as BACKPRESSURE_MEASUREMENT
from collector.vocabulary import (FIELD_COUNT, LATENCY, TAG_APP, TAG_EXECUTOR, TAG_OPERATOR, TAG_QUERY, TAG_RUN,
                                  TAG_SOURCE, TAG_STEP)

from alerts.figure_read import figure_of
from alerts.figures import AGE, EXECUTOR, FIGURES, LEVELS, OPERATOR
from alerts.rules import FIGURE, STATUS, Rule

MAX_JOBS_LISTED = 20                  # a database may hold hundreds of runs: the newest are the likely ones
NEW_JOB_FLAG = "--new-job"
NEW_JOB_HINT = f"for a job that has not run yet, add {NEW_JOB_FLAG}"
#: scope tag -> the rule's attribute holding its value
_TAG_ATTRS = {TAG_RUN: "job", TAG_QUERY: "query", TAG_SOURCE: "source", TAG_OPERATOR: "operator",
              TAG_APP: "app", TAG_EXECUTOR: "executor", TAG_STEP: "step"}
_TAG_WORDS = {TAG_RUN: "job"}         # how a tag reads in a note ("job orders query q1")


@dataclass(frozen=True)
class Need:
    """Points a rule's figure is read from: one field of a measurement (None: any point) within the scope."""
    measurement: str
    field: str | None
    tags: tuple[tuple[str, str], ...]       # (tag, value) the rule fixes
    figure: str                             # the figure (or the condition's metric) it is for, for notes


def _listing(jobs: tuple[str, ...]) -> str:
    # names come from the data: one with a control character is shown quoted, so a refusal stays one line
    shown = ", ".join(j if j.isprintable() else repr(j) for j in jobs[:MAX_JOBS_LISTED])
    more = len(jobs) - MAX_JOBS_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def check_job(rule: Rule, jobs: tuple[str, ...], new_job: bool = False, hint: str = NEW_JOB_HINT) -> str | None:
    """Raise ValueError if the rule's job is not among `jobs` (newest first), unless `new_job`; return a note."""
    if rule.job is None or rule.job in jobs:
        return None
    if new_job:
        return (f"rule {rule.name!r}: job {rule.job!r} has no data yet; accepted as a job that has not run "
                "yet, it reads as no data until it runs")
    if not jobs:
        raise ValueError(f"rule {rule.name!r}: job {rule.job!r} is unknown: no job has written metrics "
                         f"to this InfluxDB yet ({hint})")
    close = difflib.get_close_matches(rule.job, jobs, n=1)
    mean = f"did you mean {close[0]!r}? " if close else ""
    raise ValueError(f"rule {rule.name!r}: job {rule.job!r} is unknown; {mean}known jobs, newest first: "
                     f"{_listing(jobs)} ({hint})")


def _tags(rule: Rule, keys) -> tuple[tuple[str, str], ...]:
    return tuple((k, getattr(rule, _TAG_ATTRS[k])) for k in keys if getattr(rule, _TAG_ATTRS[k]) is not None)


def needs(rule: Rule) -> tuple[Need, ...]:
    """Return the points the rule's condition reads, one Need per field (both of `figure op figure`).

    Where they are is where the catalogue writes the rule's figure: a step's intervals (any
    `count`: each interval has one), the job's `backpressure` points, a Spark query's field.
    """
    cond = rule.condition
    if cond.kind == STATUS or (cond.kind == FIGURE and FIGURES[cond.metric].aggregate == AGE):
        return ()                   # a run's status and its batch age: a run started is all they read
    figure, level = figure_of(rule)
    lv = LEVELS[level]
    if level == STEPS:
        return (Need(lv.measurement, FIELD_COUNT, _tags(rule, (TAG_RUN, TAG_STEP)), cond.metric),)
    if level == JOB:
        return (Need(lv.measurement, None, _tags(rule, (TAG_RUN,)) + lv.where, cond.metric),)
    names = (figure.name,) if cond.against is None else (figure.name, cond.against)
    return tuple(Need(lv.measurement, CATALOGUE[n].fields[level][0], _tags(rule, lv.tags), n) for n in names)


def missing_note(rule: Rule, need: Need) -> str:
    """Return the note for a rule whose `need` has no point yet: who never reported what, and what to expect."""
    scope = dict(need.tags)
    who = " ".join(f"{_TAG_WORDS.get(k, k)} {v}" for k, v in need.tags if k != TAG_STEP)
    metric = rule.condition.metric
    if need.measurement == LATENCY:
        step = scope.get(TAG_STEP)
        what = (f"{who} reports no latency steps" if TAG_RUN in scope else f"no job reports step {step}'s latency")
        text = f"{what}; {metric} has no data until it records some (record_latency/timed_step)"
    elif need.measurement == BACKPRESSURE_MEASUREMENT:
        text = f"{who or 'no job'} reports no backpressure yet; {metric} has no data until it does"
    elif OPERATOR in FIGURES[need.figure].fields:
        what = f"{who} has no stateful operator" if who else "no job has a stateful operator yet"
        text = f"{what}; {need.figure} stays empty"
    elif EXECUTOR in FIGURES[need.figure].fields:
        what = f"{who} has reported no {need.figure}" if who else f"no executor has reported {need.figure}"
        text = f"{what} yet (Spark's metrics system sends it); the rule has no data until it does"
    else:
        what = f"{who} has never reported {need.figure}" if who else f"no job has reported {need.figure} yet"
        text = f"{what} ({FIGURES[need.figure].about}); the rule has no data until it does"
    return f"rule {rule.name!r}: {text}"


def has_data(reader: MetricsReader, need: Need) -> bool:
    """Return whether any point of the need's scope was written (MetricsError when the backend can't say)."""
    return reader.has_data(need.measurement, need.field, dict(need.tags))


def known_jobs(reader: MetricsReader) -> tuple[str, ...]:
    """Return every job a rule can name (the run tag of the measurements rules read), newest first."""
    return reader.known_jobs()
