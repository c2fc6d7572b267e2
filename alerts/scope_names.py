"""Check a rule's step, pipeline and worker against the names runs report.

A misspelled step (`chek_market_data`) matches no data, and no data never fires: the rule
would stay OK forever. So `alerts add`, `alerts load` and the Alerts page refuse a name
no run reports, with the valid ones in the message. A rule naming a run that has data is
checked against that run's own steps, and that step's pipelines and workers; a rule
naming no run (or a run not started yet) against the steps and pipelines every run
reports, and the workers any run reports for the step. When the backend cannot say
(unreachable, or no run has that step yet) steps and pipelines are checked against the
fixed lists and a worker is accepted with a note: an outage must not block editing.

A Spark query's figure is scoped by query, source, operator (or an executor's by app and
executor) instead: `check_figure_scope` refuses a value the named run (or any run) never
reported, listing the valid ones, and accepts one with a note when nothing was reported
yet or the backend can't say.

A rule's job itself is checked first (`alerts.job_names`): a job no data knows is refused
with the known ones, unless `new_job` says it has not run yet; so is a query the job (or,
without a job, any job) never reported. A figure the job never reported gets a note.

`check_scope` is pure; `reported_names`, `check_figure_scope` and `check_rules` ask the
backend's reader (an `InfluxClient` given instead is read through the InfluxDB reader).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from collector.metrics.backend import MetricsError, MetricsReader
from collector.vocabulary import LATENCY, MARKET_SPREAD_STEPS as STEPS, PIPELINES, RUNS, TAG_STEP, TAG_WORKER

from alerts.figures import EXECUTOR, FIGURES, LEVELS, OPERATOR, QUERY, SOURCE
from alerts.job_names import NEW_JOB_HINT, check_job, has_data, known_jobs, missing_note, needs
from alerts.rules import FIGURE, Rule
from alerts.wiring import reader_of

MAX_LISTED = 20                       # names listed in an error; a run may have hundreds of workers


@dataclass(frozen=True)
class ReportedNames:
    """The names a rule's scope may use; `workers` None when unknown (then any is accepted)."""
    steps: tuple[str, ...]
    pipelines: tuple[str, ...]
    workers: tuple[str, ...] | None
    source: str                       # whose names these are, for messages: "run r1", "any run"
    note: str | None = None           # why a name could not be checked
    of_step: bool = False             # pipelines and workers are those of the rule's step only


FIXED = ReportedNames(STEPS, PIPELINES, None, "any run")


def _listing(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" … ({len(names)} in all)" if len(names) > MAX_LISTED else "")


def _check(value: str | None, valid: tuple[str, ...], what: str, source: str) -> None:
    if value is None or value in valid:
        return
    if not valid:
        raise ValueError(f"{what} {value!r}: {source} has no {what}s yet")
    close = difflib.get_close_matches(value, valid, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    article = "an" if what[0] in "aeiou" else "a"
    raise ValueError(f"{what} {value!r} is not {article} {what} of {source}; {hint}valid: {_listing(valid)}")


def check_scope(rule: Rule, names: ReportedNames) -> str | None:
    """Raise ValueError if the rule's step, pipeline or worker is not among `names`; return a note."""
    if rule.step is None:                       # backlog / backpressure: the whole job's figure
        return None
    of = f"{names.source}'s step {rule.step}" if names.of_step else names.source
    try:
        _check(rule.step, names.steps, "step", names.source)
        _check(rule.pipeline, names.pipelines, "pipeline", of)
        if names.workers is not None:
            _check(rule.worker, names.workers, "worker", of)
    except ValueError as e:
        raise ValueError(f"rule {rule.name!r}: {e}") from None
    if rule.worker is not None and names.workers is None:
        return f"rule {rule.name!r}: worker {rule.worker!r} not checked ({names.note or 'no run reports workers yet'})"
    return None


def reported_names(client, rule: Rule, job_known: bool = False) -> ReportedNames:
    """Return the names the rule's run reports (or every run's), the fixed lists when the backend can't say.

    `job_known`: the run has other data (a Spark query's) or has not run yet, and no latency
    step yet, so its own steps are still to come: the rule's step and pipeline are taken as given.
    """
    if rule.step is None:
        return FIXED
    reader = reader_of(client)
    try:
        if rule.job is not None:
            steps = tuple(reader.steps(rule.job))
            if not steps and job_known:
                pipelines = PIPELINES if rule.pipeline is None else (rule.pipeline,)
                return ReportedNames((rule.step,), pipelines, None, f"run {rule.job}",
                                     f"run {rule.job} reports no latency steps yet")
            if steps:
                source = f"run {rule.job}"
                if rule.step not in steps:
                    return ReportedNames(steps, PIPELINES, None, source)
                pipelines, workers = reader.step_filters(rule.job, rule.step)
                return ReportedNames(steps, tuple(pipelines), tuple(workers), source, of_step=True)
        workers = reader.tag_values(LATENCY, TAG_WORKER, {TAG_STEP: rule.step}) if rule.worker is not None else ()
    except MetricsError as e:
        return ReportedNames(STEPS, PIPELINES, None, "any run", _unreachable(reader, e))
    source = "any run" if rule.job is None else f"any run (run {rule.job} has no data yet)"
    if not workers:
        return ReportedNames(STEPS, PIPELINES, None, source, f"no run has reported step {rule.step} yet")
    # every run has both pipelines; the workers are those any run had for this step
    return ReportedNames(STEPS, PIPELINES, workers, source, of_step=True)


def _unreachable(reader: MetricsReader, e: MetricsError) -> str:
    return f"{reader.where} is unreachable" if e.unreachable else f"{e.backend}: {e}"


def check_figure_scope(client, rule: Rule, new_job: bool = False,
                       hint: str = NEW_JOB_HINT) -> str | None:
    """Raise ValueError if a figure rule's query, source, operator, app or executor was never reported; return a note.

    A query nothing reported is refused even when the job reported none yet (a query
    that started without a batch counts: its `runs` point); `new_job` accepts it with a note.
    """
    reader = reader_of(client)
    anyone = "any run"
    figure = FIGURES.get(rule.condition.metric)         # None: a run's status, scoped by job and query only
    if figure is not None and EXECUTOR in figure.fields:
        anyone = "any app"
        executors = (LEVELS[EXECUTOR][0],)
        checks = [("app", "app", executors, {}), ("executor", "executor", executors, {"app": rule.app})]
    else:
        checks = [("query", "query", (LEVELS[QUERY][0], RUNS), {"run": rule.job}),
                  ("source", "source", (LEVELS[SOURCE][0],), {"run": rule.job, "query": rule.query}),
                  ("operator", "operator", (LEVELS[OPERATOR][0],), {"run": rule.job, "query": rule.query})]
    notes = []
    for attr, key, measurements, where in checks:
        value = getattr(rule, attr)
        if value is None:
            continue
        where = {k: v for k, v in where.items() if v is not None}
        whose = " ".join(f"{'run' if k == 'run' else k} {v}" for k, v in where.items()) or anyone
        try:
            valid = tuple(sorted({v for m in measurements for v in reader.tag_values(m, key, where)}))
        except MetricsError as e:
            return f"rule {rule.name!r}: {attr} {value!r} not checked ({_unreachable(reader, e)})"
        if value in valid:
            continue
        if attr == "query" and new_job:
            notes.append(f"rule {rule.name!r}: query {value!r} has no data from {whose} yet; accepted as a query "
                         "that has not run yet")
            continue
        if not valid and attr == "query":
            raise ValueError(f"rule {rule.name!r}: query {value!r} is unknown: {whose} has reported no query "
                             f"yet ({hint})")
        if not valid:
            notes.append(f"rule {rule.name!r}: {attr} {value!r} not checked ({whose} has reported no {attr} yet)")
            continue
        try:
            _check(value, valid, attr, whose)
        except ValueError as e:
            tail = f" ({hint})" if attr == "query" else ""
            raise ValueError(f"rule {rule.name!r}: {e}{tail}") from None
    return "; ".join(notes) or None


def _figure_note(reader: MetricsReader, rule: Rule, found: dict) -> str | None:
    """Return a note when the points the rule reads were never written (`found` caches the answers)."""
    for need in needs(rule):
        if need not in found:
            try:
                found[need] = has_data(reader, need)
            except MetricsError as e:
                return f"rule {rule.name!r}: its data not checked ({_unreachable(reader, e)})"
        if not found[need]:
            return missing_note(rule, need)
    return None


def check_rules(client, rules: list[Rule], new_job: bool = False, hint: str = NEW_JOB_HINT) -> list[str]:
    """Check every rule's job and scope names against the metrics; raise ValueError on the first bad one; return notes.

    `new_job` accepts a job or query no data knows yet (with a note); `hint` is how the
    caller's user says so, for the refusal's message.
    """
    reader = reader_of(client)
    asked: dict[tuple, ReportedNames] = {}          # a rules file repeats scopes: ask once per scope
    found: dict = {}
    jobs, down = None, None
    if any(rule.job is not None for rule in rules):
        try:
            jobs = known_jobs(reader)
        except MetricsError as e:
            down = _unreachable(reader, e)
    notes = []
    for rule in rules:
        if rule.job is not None and down is not None:
            notes.append(f"rule {rule.name!r}: job {rule.job!r} not checked ({down})")
        job_note = check_job(rule, jobs, new_job, hint) if jobs is not None else None
        if job_note:
            notes.append(job_note)
        if rule.condition.kind == FIGURE or rule.query is not None:
            # a job not run yet reported no query, source or operator: nothing to check them against
            note = None if job_note else check_figure_scope(reader, rule, new_job, hint)
        else:
            key = (rule.job, rule.step, rule.pipeline, rule.worker is not None)
            if key not in asked:
                # a job with data, or one declared new: its own steps may be still to come
                asked[key] = reported_names(reader, rule, jobs is not None and (rule.job in jobs or new_job))
            note = check_scope(rule, asked[key])
        if note:
            notes.append(note)
        elif not job_note and down is None:         # one note per rule: a scope's note says it already
            note = _figure_note(reader, rule, found)
            notes += [note] if note else []
    return notes
