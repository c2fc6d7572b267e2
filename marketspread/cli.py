"""`marketspread`: the command line of the Market Spread job and its tools."""
from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import fields, replace
from pathlib import Path

from collector.settings import add_setting_flags, env_is_set
from engine.config import COMMON, JOB, RETENTION, Config
from engine.spark.checkpoint import check_shards, settle_shards
from marketspread.version import version

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _add_config(p: argparse.ArgumentParser, group: str, title: str) -> None:
    """Add the flags of `Config`'s fields of `group` (engine/config.py declares each one)."""
    add_setting_flags(p.add_argument_group(title), Config, group=group, defaults=Config.from_env({}))


def _add_common(p: argparse.ArgumentParser) -> None:
    _add_config(p, COMMON, "common (also MS_<NAME> environment variables)")


def _add_retention(p: argparse.ArgumentParser) -> None:
    _add_config(p, RETENTION, "disk retention (docs/OPERATIONS.md: Retention and disk)")


def config_from(args: argparse.Namespace) -> Config:
    """Build the Config from the environment and the flags given (every field of Config has one)."""
    over = {f.name: getattr(args, f.name, None) for f in fields(Config)}
    cfg = Config.from_env(**over)
    check_shards(cfg.shards)
    if over["max_backlog"] is not None and over["resume_backlog"] is None:
        cfg = replace(cfg, resume_backlog=cfg.max_backlog // 2)
    return cfg


def ingress_config(args) -> Config:
    """The ingress's config: it writes shard files for the job's shard count, given, else the checkpoint's."""
    cfg = config_from(args)
    return cfg if _shards_given(args) else settle_shards(cfg, False)


def _cmd_ingress(args) -> int:
    from marketspread.ingress import run_ingress  # lazy: each command imports only its own modules
    return run_ingress(ingress_config(args), influx=_influx()) or 0


def _shards_given(args) -> bool:
    return getattr(args, "shards", None) is not None or env_is_set("MS_SHARDS")


def _influx():
    """Return where metrics go: `MS_INFLUX_*`, read once for the command."""
    from collector.influx import InfluxConfig  # lazy: each command imports only its own modules
    return InfluxConfig.from_env()


def _job_config(args) -> Config:
    """The config of a command that runs the job on a state folder: its checkpoint's shard count."""
    return settle_shards(config_from(args), _shards_given(args))


def _cmd_job(args) -> int:
    from marketspread.runner import run_job  # lazy: pyspark
    from alerts.settings import AlertSettings  # lazy: as above
    cfg = _job_config(args)
    return run_job(cfg, duration=args.duration, forward=args.forward, influx=_influx(),
                   alerts=AlertSettings.from_env(state_dir=cfg.state_dir), rescale_pause=args.pause_rescale_at)


def _cmd_rescale(args) -> int:
    from marketspread.runner import rescale_offline  # lazy: a command's own module
    cfg = config_from(args)
    if not _shards_given(args):
        raise ValueError("rescale needs --shards (the count to re-partition the checkpoint's state to)")
    done = rescale_offline(cfg, pause=args.pause_rescale_at)
    for r in done:
        print(f"rescaled {cfg.checkpoint_dir} from {r.from_shards} to {r.to_shards} shards at batch {r.batch}: "
              f"{r.symbols} symbols in {r.seconds:.2f} s")
    if not done:
        print(f"{cfg.checkpoint_dir} has {cfg.shards} shards already (or no batch yet): nothing to do")
    return 0


def _add_pause(p: argparse.ArgumentParser) -> None:
    # For the crash tests only: stop (sleep until killed) at a point of a rescale.
    p.add_argument("--pause-rescale-at", metavar="POINT", help=argparse.SUPPRESS)


def _cmd_replay(args) -> int:
    from marketspread.replay import replay  # lazy: a command's own module
    ship = env_is_set("MS_INFLUX_URL")
    rep = replay(args.nbbo, args.orders, args.out, config_from(args), run_id=args.run_id, keep=args.keep,
                 ship_metrics=ship, influx=_influx() if ship else None)
    print(f"replay {rep.run_id}: {rep.accepted} messages, {rep.bad} bad, {rep.results} results "
          f"in {rep.seconds:.1f} s -> {rep.out}")
    print(rep.timing.summary())
    return 0


def _cmd_jvm_archive(args) -> int:
    from marketspread.jvm_archive import make_archive  # lazy: a command's own module
    print(f"JVM class archive -> {make_archive(config_from(args))}")
    return 0


def _cmd_results(args) -> int:
    from marketspread.replay import write_results  # lazy: a command's own module
    n = write_results(config_from(args).out_dir, args.out)
    print(f"{n} result records -> {args.out}")
    return 0


def _cmd_demo(args) -> int:
    from marketspread.demo import run_demo  # lazy: a command's own module
    return run_demo(_job_config(args), rate=args.rate, duration=args.duration, symbols=args.symbols,
                    ui_port=args.ui_port, influx=_influx(), own_server=not env_is_set("MS_INFLUX_URL"))


def _cmd_bench(args) -> int:
    from perf.perftest import run_cli  # lazy: a command's own package
    return run_cli(args, config_from(args), _influx(), own_server=not env_is_set("MS_INFLUX_URL"))


_TOOLS = (("influxdb", "run the project's own InfluxDB server (start|stop|status|init)"),
          ("ui", "serve the metrics dashboard (reads MS_INFLUX_URL, MS_INFLUX_DB)"),
          ("alerts", "SLA alert rules: list|add|rm|load|mute|unmute|serve"),
          ("alertmanager", "run a Prometheus Alertmanager beside the dashboard (start|stop|status)"),
          ("generate", "generate synthetic NBBO and order files"),
          ("send", "send fixish files to an ingress port at a rate"),
          ("receive", "receive result frames on a port"),
          ("watch", "run your own PySpark script with the monitor attached: watch -- job.py [args]"))


def _tool_module(name: str):
    """Return the module with `add_arguments` and `run` of a command of another package."""
    if name == "influxdb":
        from collector.influx import server as influx_server  # lazy: a command's own package
        return influx_server
    if name == "ui":
        from metrics_ui import app  # lazy: Dash and Flask only for `ui`
        return app
    if name == "alerts":
        from alerts import cli  # lazy: a command's own package
        return cli
    if name == "alertmanager":
        from alerts import alertmanager_server  # lazy: a command's own module
        return alertmanager_server
    if name == "watch":
        from marketspread import watch  # lazy: a command's own module
        return watch
    from engine.tools import generate, receiver, sender  # lazy: a command's own package
    return {"generate": generate, "send": sender, "receive": receiver}[name]


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is one), None if none is."""
    names = {"ingress", "job", "rescale", "replay", "jvm-archive", "results", "demo", "bench", *(n for n, _ in _TOOLS)}
    return next((a for a in argv if a in names), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Return the argument parser: every subcommand, with the arguments of the one `argv` names
    (all of them when `argv` is None)."""
    chosen = None if argv is None else _chosen(argv)
    parser = argparse.ArgumentParser(prog="marketspread", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"marketspread {version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingress", help="run the TCP ingress (NBBO and orders ports) into the log")
    _add_common(p)
    p.set_defaults(func=_cmd_ingress)

    p = sub.add_parser("job", help="run the Market Spread streaming job on the ingress log")
    _add_common(p)
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--forward", metavar="HOST:PORT",
                   help="also stream committed results to a TCP receiver (at-least-once per batch)")
    _add_config(p, JOB, "job")
    _add_retention(p)
    _add_pause(p)
    p.set_defaults(func=_cmd_job)

    p = sub.add_parser("rescale", help="re-partition a stopped job's checkpoint to --shards N (the job "
                                       "does it itself when started with another --shards)")
    add_setting_flags(p, Config, names=("state_dir", "shards"), defaults=Config.from_env({}),
                      help={"shards": "the shard count to re-partition the checkpoint's state to"})
    _add_pause(p)
    p.set_defaults(func=_cmd_rescale)

    p = sub.add_parser("replay", help="replay fixish files through ingress and the job, write results")
    _add_common(p)
    p.add_argument("--nbbo", type=Path, action="append", required=True, help="NBBO fixish file (repeatable)")
    p.add_argument("--orders", type=Path, action="append", required=True, help="order fixish file (repeatable)")
    p.add_argument("--out", type=Path, required=True, help="result file (Wallaroo OrderResult frames)")
    p.add_argument("--run-id", help="name of this run (metrics are tagged with it)")
    p.add_argument("--keep", action="store_true", help="keep the run's ingress log and checkpoint")
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser("jvm-archive", help="compile the project's JVM classes and record the Spark driver's classes, once")
    _add_common(p)
    p.set_defaults(func=_cmd_jvm_archive)

    p = sub.add_parser("results", help="write the job's committed results to one file")
    _add_common(p)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=_cmd_results)

    p = sub.add_parser("demo", help="live demo: ingress, job and senders on generated data")
    _add_common(p)
    p.add_argument("--rate", type=int, default=50_000, help="messages/s per stream (default 50000)")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    p.add_argument("--symbols", type=int, default=350)
    p.add_argument("--ui-port", type=int, default=8050, help="dashboard port (default 8050)")
    _add_retention(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("bench", help="performance test: run everything at a rate, record figures for comparison")
    _add_common(p)
    if chosen == "bench":
        from perf import perftest  # lazy: a command's own package
        perftest.add_arguments(p)
    p.set_defaults(func=_cmd_bench)

    # The other commands live in their own packages; only the one asked for is imported, so
    # a quick command (`alerts list`, `send`) does not pay for Dash, Flask and the rest.
    for name, help_ in _TOOLS:
        p = sub.add_parser(name, help=help_)
        if name == chosen or chosen is None:
            mod = _tool_module(name)
            mod.add_arguments(p)
            p.set_defaults(func=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `marketspread` command line."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    # a process's first command sets logging up; where it is set up already (an embedding
    # process, a test calling `main` in-process) it is left as it is, so `main` runs again
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format=LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)      # one INFO line per callback otherwise
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, TimeoutError, RuntimeError) as e:    # OSError: e.g. a full disk
        print(f"marketspread {args.command}: error: {e}", file=sys.stderr)
        return 2
