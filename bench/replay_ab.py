"""`marketspread replay` of two commits, alternated in one run: wall time and its breakdown.

    python -m bench.replay_ab --a 79a240f --b HEAD --pairs 3     # 1M NBBO + 1M orders, 2,000 symbols

Each commit's tree is exported (`git archive`) to a temp folder and runs with this
checkout's `.venv`; runs alternate A, B, A, B, ... on the same generated files, each a
fresh `python -m marketspread replay` process with a fresh state folder. Every run's results are
checked against `engine.rule.reference_results`. Prints the median of each phase of the
replay's own timing breakdown (both commits must print it) and the whole command's wall
time per commit, with B/A; writes `bench/out/replay-ab-<UTC time>.json` (`--record`:
bench/results/). On a shared machine look at the load average in the JSON before trusting
a ratio.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import peers
from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from engine.tools.generate import generate
from engine.wire.fixish import read_results
from perf.sysinfo import git_info, machine_summary

PHASES = ("start-up", "ingest", "to 1st batch", "first batch", "steady", "drain", "finish")


@dataclass(frozen=True)
class ReplayRun:
    """One replay: which commit, the command's wall time, the replay's own breakdown."""
    variant: str
    commit: str
    wall_s: float
    phases: dict[str, float]
    exact: bool
    detail: str
    loadavg: float


def export_tree(commit: str, dest: Path) -> str:
    """Write the tree of `commit` to `dest`; return its short hash."""
    short = subprocess.run(["git", "rev-parse", "--short", commit], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", "--format=tar", short], cwd=ROOT, check=True,
                             capture_output=True).stdout
    dest.mkdir(parents=True)
    tar = dest / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    tar.unlink()
    return short


def parse_phases(output: str) -> dict[str, float]:
    """Read the phases of the `replay timing:` block a replay prints."""
    phases = {}
    for line in output.splitlines():
        if line.startswith("replay timing:"):
            phases["total"] = float(line.split()[2])
        elif line.startswith("  ") and line[2:15].strip() in PHASES:
            phases[line[2:15].strip()] = float(line[15:21])
            if line[2:15].strip() == "steady" and "median " in line:
                phases["steady median"] = float(line.split("median ")[1].split()[0])
    if phases.get("steady median"):
        phases["first / steady median"] = round(phases["first batch"] / phases["steady median"], 2)
    return phases


def run_once(variant: str, commit: str, tree: Path, nbbo: Path, orders: Path, work: Path,
             want: list[tuple], extra_env: dict[str, str] | None = None) -> ReplayRun:
    """Run one replay from `tree` (with `extra_env` added to its environment) and check its results."""
    out = work / "results.msg"
    env = {k: v for k, v in os.environ.items() if k not in ("MS_INFLUX_URL", "MS_STATE_DIR")}
    env["PYTHONPATH"] = str(tree)
    env.update(extra_env or {})
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "marketspread", "replay", "--nbbo", str(nbbo), "--orders", str(orders),
                           "--out", str(out), "--state-dir", str(work)], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=peers.RUN_TIMEOUT)
    wall = time.monotonic() - t0
    if proc.returncode != 0 or not out.exists():
        return ReplayRun(variant, commit, wall, {}, False, f"exit {proc.returncode}: {proc.stderr[-300:]}", load)
    got = [tuple(r[:8]) for r in read_results(out.read_bytes())]
    exact, detail = peers.compare(got, want)
    shutil.rmtree(work, ignore_errors=True)
    return ReplayRun(variant, commit, wall, parse_phases(proc.stdout), exact, detail, load)


def medians(runs: list[ReplayRun]) -> dict[str, float]:
    """Median wall time and median of each phase."""
    keys = ["wall"] + ["total", *PHASES, "steady median", "first / steady median"]
    out = {"wall": statistics.median(r.wall_s for r in runs)}
    for k in keys[1:]:
        vals = [r.phases[k] for r in runs if k in r.phases]
        if vals:
            out[k] = statistics.median(vals)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replay_ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="the commit before (A)")
    p.add_argument("--b", default="HEAD", help="the commit after (B, default HEAD)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--symbols", type=int, default=2000)
    p.add_argument("--nbbo", type=int, default=1_000_000)
    p.add_argument("--orders", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--label", default="", help="what B changes, kept in the JSON")
    for v in ("a", "b"):
        p.add_argument(f"--{v}-env", action="append", default=[], metavar="NAME=VALUE",
                       help=f"environment variable of {v.upper()}'s runs only (repeatable), e.g. a switch "
                            "to compare one commit with and without a setting")
    p.add_argument("--out", type=Path, help="JSON file (default bench/out/replay-ab-<UTC time>.json)")
    add_record_flag(p)
    args = p.parse_args(argv)
    envs = {v: dict(kv.split("=", 1) for kv in getattr(args, f"{v.lower()}_env")) for v in ("A", "B")}
    tmp = Path(tempfile.mkdtemp(prefix="ms-replay-ab-"))
    machine, git = machine_summary(), git_info(ROOT)
    runs: list[ReplayRun] = []
    try:
        trees = {}
        for variant, commit in (("A", args.a), ("B", args.b)):
            trees[variant] = (export_tree(commit, tmp / variant), tmp / variant)
        nbbo, orders = tmp / "data" / "nbbo.msg", tmp / "data" / "orders.msg"
        generate(nbbo, orders, symbols=args.symbols, nbbo=args.nbbo, orders=args.orders, seed=args.seed)
        _, want = peers.reference(nbbo, orders)
        for i in range(args.pairs):
            for variant in ("A", "B"):
                commit, tree = trees[variant]
                run = run_once(variant, commit, tree, nbbo, orders, tmp / f"run-{i}-{variant}", want,
                               envs[variant])
                runs.append(run)
                print(f"pair {i + 1} {variant} {commit}: {run.wall_s:6.2f} s wall, first batch "
                      f"{run.phases.get('first batch', float('nan')):.2f} s, load {run.loadavg:.1f}"
                      f"{'' if run.exact else '  NOT EXACT: ' + run.detail}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {v: medians([r for r in runs if r.variant == v]) for v in ("A", "B")}
    print(f"\n| median (s) | A {trees['A'][0]} | B {trees['B'][0]} | B/A |\n|---|---|---|---|")
    for k in med["A"]:
        a, b = med["A"][k], med["B"].get(k, float("nan"))
        print(f"| {k} | {a:.2f} | {b:.2f} | {b / a if a else float('nan'):.3f} |")
    out = write_result({
        "benchmark": "replay-ab", "label": args.label, "command": [sys.executable, *sys.argv],
        "a": trees["A"][0], "b": trees["B"][0], "a_env": envs["A"], "b_env": envs["B"],
        "input": {"symbols": args.symbols, "nbbo": args.nbbo, "orders": args.orders, "seed": args.seed},
        "machine": dict(machine, loadavg_at_end=list(os.getloadavg())), "git": git,
        "medians": med, "runs": [asdict(r) for r in runs]}, args.out or result_path("replay-ab", args.record))
    print(f"\n-> {shown(out)}")
    return 0 if all(r.exact for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
