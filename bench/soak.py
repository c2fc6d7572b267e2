"""Soak: a steady load for 10 minutes; memory, files, threads and state must stay flat.

    python -m bench.soak [--duration 600] [--rate 20000] [--every 5] [--warmup 60]

The run and its verdict are perf/soak.py's (its docstring says what is measured and judged).
Writes bench/out/soak.json (bench/results/soak.json with `--record`) and prints the verdict;
exit 1 only if the run broke, never on a figure.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, utc_stamp, write_result
from collector.safe_delete import try_remove_tree
from engine.config import Config
from perf.soak import Tolerance, format_verdict, run_soak, verdict
from perf.sysinfo import git_info, machine_summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds of steady load (600)")
    p.add_argument("--rate", type=int, default=20_000, help="events/s over both streams (20000)")
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples (5)")
    p.add_argument("--warmup", type=float, default=60.0, help="seconds left out of the verdict (60)")
    p.add_argument("--gc-every", type=float, default=30.0,
                   help="seconds between full GCs of the job's JVM to read its live heap (30; 0: never)")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--shards", type=int, default=Config().shards)
    p.add_argument("--symbols", type=int, default=350, help="symbols of the generated input (350)")
    p.add_argument("--state-dir", type=Path, help="default: a temporary folder, removed afterwards")
    add_record_flag(p)
    args = p.parse_args(argv)
    temp = args.state_dir is None
    state_dir = Path(tempfile.mkdtemp(prefix="ms-soak-")) if temp else args.state_dir
    machine, git = machine_summary(), git_info(ROOT)
    try:
        samples = run_soak(state_dir, args.duration, args.rate, args.every, args.shards, args.master,
                           symbols=args.symbols, gc_every=args.gc_every or None)
    except (RuntimeError, TimeoutError) as e:
        print(f"soak: the run broke: {e}", file=sys.stderr)
        return 1
    finally:
        if temp:
            try_remove_tree(state_dir)
    v = verdict(samples, args.warmup, args.symbols)
    doc = {"benchmark": "soak", "utc": utc_stamp(), "command": shlex.join([sys.executable, *sys.argv]),
           "settings": vars(args), "git": git, "machine": dict(machine, loadavg_at_end=list(os.getloadavg())),
           "tolerance": asdict(Tolerance()), "verdict": v, "samples": [asdict(s) for s in samples]}
    path = write_result(doc, result_path("soak", args.record, stamped=False), default=str)
    print(format_verdict(v) + f"\n-> {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
