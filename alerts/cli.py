"""`marketspread alerts list|add|rm|load|mute|unmute|serve`: manage and evaluate alert rules.

Rules live in `<state>/alerts/rules.json` (`--state-dir`, `MS_STATE_DIR`, or
`MS_ALERTS_FILE`); a running evaluator applies every change at its next cycle. Bad input
exits 2 with one line saying what is wrong (ValueError, handled by `marketspread.cli.main`),
including a job no data knows (unless `--new-job`: a job that has not run yet) and a step,
pipeline, worker, query, source or operator no run reports (`alerts.scope_names`); a figure
the job never reported is a note on stderr. `list` shows the states of this folder's
namespace only (`alerts.namespace`).
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from collector.metrics.backend import MetricsError
from collector.names import check_name
from collector.settings import default_state_dir

from alerts.evaluate import NODATA_POLICIES
from alerts.evaluator import read_status, start_evaluator
from alerts.history import AlertHistory
from alerts.job_names import NEW_JOB_FLAG
from alerts.lease import Lease, leader_of
from alerts.namespace import load_namespace
from alerts.rules import CONDITION_HELP, SEVERITY_HELP, Rule, format_duration, redact_url
from alerts.scope_names import check_rules
from alerts.settings import DEFAULT_INTERVAL_S, AlertSettings
from alerts.store import RuleStore, read_rules_file
from alerts.webhook_target import check_webhook_target
from alerts.wiring import BackendConfig, close_reader, describe, open_reader, open_writer

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `alerts` subcommands."""
    parser.add_argument("--state-dir", type=Path, help="state folder holding alerts/rules.json "
                                                      f"[MS_STATE_DIR, default {default_state_dir({})}]")
    sub = parser.add_subparsers(dest="alerts_command", required=True, metavar="{list,add,rm,load,mute,unmute,serve}")

    p = sub.add_parser("list", help="list the rules with their current state")
    p.set_defaults(alerts_func=_list)

    p = sub.add_parser("add", help="add a rule (or change one with --replace)",
                       description=f"CONDITION is {CONDITION_HELP}.")
    p.add_argument("name", help="rule name: letters, digits and _ . : @ + - (first a letter or digit)")
    p.add_argument("condition", help="e.g. 'p99 > 5ms' (quote it: > redirects in a shell)")
    p.add_argument("--step", help="step (default start-to-end; not for backlog/backpressure); "
                                  "checked, as --pipeline and --worker, against what the runs report")
    p.add_argument("--pipeline", help="nbbo or orders (default: both)")
    p.add_argument("--worker", help="one worker, e.g. host/p0 (default: all)")
    p.add_argument("--job", help="run id (default: any run writing metrics); one no data knows is refused, "
                                 f"listing the known ones, unless {NEW_JOB_FLAG}")
    p.add_argument("--query", help="a Spark query's name or id (figures like rows_behind; default: all)")
    p.add_argument("--source", help="one source of the query, e.g. 0:KafkaV2 (rows_behind, input_rate, ...)")
    p.add_argument("--operator", help="one stateful operator, e.g. 0:stateStoreSave (state_rows, late_rows, ...)")
    p.add_argument("--app", help="a Spark application id (heap_used, gc_time; default: any)")
    p.add_argument("--executor", help="one executor: driver or its id (heap_used, gc_time; default: all)")
    p.add_argument("--window", default="1m", help="evaluation window (default %(default)s)")
    p.add_argument("--for", dest="for_", default="0s", help="pending period before firing (default %(default)s)")
    p.add_argument("--webhook", help="http(s) URL that receives a JSON POST on FIRING and RESOLVED "
                                     "(public addresses only, unless MS_WEBHOOK_ALLOW allows it)")
    p.add_argument("--muted", action="store_true", help="add it muted (evaluated, not notified)")
    p.add_argument("--severity", help=f"the severity label sent to Alertmanager: {SEVERITY_HELP}")
    p.add_argument("--nodata", choices=NODATA_POLICIES,
                   help="while the scope reports nothing: keep the state (default; a firing alert stays firing), "
                        "ok (resolve) or alerting (fire after --for)")
    p.add_argument("--replace", action="store_true", help="replace a rule of the same name")
    _add_new_job(p)
    p.set_defaults(alerts_func=_add)

    p = sub.add_parser("rm", help="delete a rule")
    p.add_argument("name")
    p.set_defaults(alerts_func=_rm)

    p = sub.add_parser("load", help="add or replace the rules of a YAML (or JSON) file")
    p.add_argument("file", type=Path)
    _add_new_job(p)
    p.set_defaults(alerts_func=_load)

    for name, muted in (("mute", True), ("unmute", False)):
        p = sub.add_parser(name, help=f"{name} a rule (muted: evaluated and recorded, no webhook, no banner)")
        p.add_argument("name")
        p.set_defaults(alerts_func=_mute, muted=muted)

    p = sub.add_parser("serve", help="run the evaluator in the foreground (when no job runs it)")
    p.add_argument("--interval", type=float, help="seconds between evaluations "
                                                  f"[MS_ALERTS_INTERVAL_S, default {DEFAULT_INTERVAL_S:g}]")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.set_defaults(alerts_func=_serve)


def _add_new_job(p: argparse.ArgumentParser) -> None:
    p.add_argument(NEW_JOB_FLAG, dest="new_job", action="store_true",
                   help="accept a --job or --query no data knows yet (a job that has not run yet), with a note")


def run(args: argparse.Namespace) -> int:
    """Run one `alerts` subcommand, with the settings read here once and carried in `args`."""
    args.alerts = AlertSettings.from_env(state_dir=args.state_dir)
    args.influx = BackendConfig.from_env()
    return args.alerts_func(args, RuleStore(args.alerts.rules_path))


def _list(args, store: RuleStore) -> int:
    rules = store.rules()
    if not rules:
        print(f"no rules in {store.path} (add one: marketspread alerts add NAME 'p99 > 5ms')")
        return 0
    states, note = _current_states(store, args.influx)
    status = read_status(store.path)
    errors = (status or {}).get("errors", {})
    no_data = (status or {}).get("no_data_since", {})
    for r in rules:
        state = states.get(r.name, "OK" if note is None else "?")
        flags = " (muted)" if r.muted else ""
        hook = f" -> {redact_url(r.webhook)}" if r.webhook else ""
        print(f"{r.name:<20} {state:<9}{flags} {r.summary()}{hook}")
        if r.name in errors:
            print(f"{'':<20} error: {errors[r.name]}")
        if r.name in no_data:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(no_data[r.name]) / 1e9))
            print(f"{'':<20} no data since {since}: {state} kept (nodata: {r.nodata})")
    if note:
        print(note, file=sys.stderr)
    print(_evaluator_line(store, args.influx, args.alerts.interval_s, status), file=sys.stderr)
    return 0


def _evaluator_line(store: RuleStore, influx, interval_s: float, status: dict | None) -> str:
    """Return which process evaluates this folder's rules: the lease's leader, else the status file's."""
    try:
        now = time.time_ns()
        holders = Lease(open_reader(influx), load_namespace(store.path).id, interval_s).holders(now)
    except (MetricsError, ValueError):
        holders = None
    if holders:
        lead = leader_of(holders)
        others = len(holders) - 1
        return (f"evaluated by {lead.process} (heard from {max(0.0, (now - lead.seen_ns) / 1e9):.0f} s ago)"
                + (f"; {others} other process{'es' if others > 1 else ''} standing by" if others else ""))
    last = ""
    if status is not None:
        age = max(0.0, (time.time_ns() - int(status.get("last_cycle_ns", 0))) / 1e9)
        last = f"evaluator pid {status.get('pid')} on {status.get('host')}: last cycle {age:.0f} s ago"
    if holders is None and last:                # InfluxDB unreachable: the status file is all there is
        return last
    return ("no evaluator is running: rules are evaluated while the dashboard (marketspread ui), a monitored "
            "job (monitor(), marketspread watch), marketspread job or marketspread alerts serve runs"
            + (f" (the last: {last})" if last else ""))


def _current_states(store: RuleStore, influx) -> tuple[dict[str, str], str | None]:
    """Return the rules' states as this folder's evaluator recorded them (its namespace only)."""
    reader = open_reader(influx)
    try:
        return {k: e.state for k, e in AlertHistory(reader, load_namespace(store.path)).current().items()}, None
    except MetricsError as e:
        return {}, f"states unknown: {reader.where} is unreachable ({e})"
    finally:
        close_reader(reader)


def _add(args, store: RuleStore) -> int:
    d = {"name": args.name, "condition": args.condition, "step": args.step, "pipeline": args.pipeline,
         "worker": args.worker, "job": args.job, "query": args.query, "source": args.source,
         "operator": args.operator, "app": args.app, "executor": args.executor, "window": args.window, "for": args.for_,
         "webhook": args.webhook, "muted": args.muted, "severity": args.severity, "nodata": args.nodata}
    rule = Rule.from_dict({k: v for k, v in d.items() if v is not None})
    notes = _check_webhooks([rule], args.alerts) + _check_scope_names([rule], args.influx, args.new_job)
    new = store.put(rule, replace=args.replace)
    print(f"{'added' if new else 'replaced'} {rule.name}: {rule.summary()}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _check_webhooks(rules: list[Rule], settings: AlertSettings) -> list[str]:
    """Refuse a rule whose webhook reaches an internal address (MS_WEBHOOK_ALLOW); return notes."""
    policy = settings.webhook_policy()
    notes = []
    for rule in rules:
        if rule.webhook:
            try:
                note = check_webhook_target(rule.webhook, policy)
            except ValueError as e:
                raise ValueError(f"rule {rule.name!r}: {e}") from None
            if note:
                notes.append(f"rule {rule.name!r}: {note}")
    return notes


def _check_scope_names(rules: list[Rule], influx, new_job: bool) -> list[str]:
    """Refuse a job, query, step, pipeline or worker no run reports (the backend from MS_INFLUX_*); return notes."""
    reader = open_reader(influx)
    try:
        return check_rules(reader, rules, new_job)
    finally:
        close_reader(reader)


def _rm(args, store: RuleStore) -> int:
    store.remove(check_name(args.name, "name"))
    print(f"removed {args.name}")
    return 0


def _load(args, store: RuleStore) -> int:
    rules = read_rules_file(args.file)
    notes = _check_webhooks(rules, args.alerts) + _check_scope_names(rules, args.influx, args.new_job)
    added, replaced = store.put_all(rules)
    print(f"{args.file}: {added} added, {replaced} replaced ({len(store.rules())} rules in {store.path})")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _mute(args, store: RuleStore) -> int:
    rule = store.set_muted(check_name(args.name, "name"), args.muted)
    print(f"{rule.name} {'muted' if rule.muted else 'unmuted'}")
    return 0


def _serve(args, store: RuleStore) -> int:
    if args.interval is not None and not args.interval > 0:
        raise ValueError("--interval must be more than 0 seconds")
    policy = args.alerts.webhook_policy()                 # a bad MS_WEBHOOK_ALLOW: one line, exit 2
    cfg = args.influx
    spool = store.path.parent.parent / "metrics-spool" / "alerts"
    stop = threading.Event()
    # the handlers are put back at the end: `main` may run in a process that goes on (tests)
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _evaluate_until_stopped(args, store, cfg, spool, policy, stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)   # None: not set from Python


def _evaluate_until_stopped(args, store: RuleStore, cfg, spool, policy, stop: threading.Event) -> int:
    with open_writer(cfg, spool, interval=0.2) as writer:
        ev = start_evaluator(None, writer, client=open_reader(cfg), interval_s=args.interval,
                             rules_path=store.path, webhook_policy=policy, settings=args.alerts)
        if ev is None:
            raise RuntimeError(f"another evaluator already evaluates {store.path}")
        log.info("alerts: %d rules, %s, every %s", len(store.rules()), describe(cfg),
                 format_duration(ev.interval_s))
        try:
            stop.wait(args.duration)
        finally:
            ev.stop()
    return 0
