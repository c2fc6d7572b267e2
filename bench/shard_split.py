"""What the shard files cost the ingress: the split and write per million events, N shards vs 1.

    python -m bench.shard_split [--events 1000000] [--commit 20000] [--repeat 5]

Times `LogWriter.append` + `commit` (fsync off: the CPU, not the disk) of generated
NBBO/order payloads in commits of `--commit` records, with the shard files of
engine/formats/shard_files.py following the log for 2 and 4 shards and none for 1, in a
temp folder beside the checkout (the state folder's file system, not a tmpfs). Best of
`--repeat`; prints ms per million events and writes them to
`bench/out/shard-split-<UTC time>.json` (`--record`: bench/results/).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from engine.formats.log import LogWriter
from engine.formats.shard_files import ShardFileWriter
from engine.tools.generate import random_payloads
from perf.sysinfo import git_info, machine_summary


def payloads(n: int, symbols: int = 2000, seed: int = 1) -> np.ndarray:
    """NBBO and orders over `symbols` symbols (the fields the split reads are real)."""
    return random_payloads(n, symbols, seed)


def time_log(p: np.ndarray, n_shards: int, commit: int, parent: Path) -> float:
    """Seconds to append and commit `p` in commits of `commit` records, with shard files for `n_shards`."""
    d = Path(tempfile.mkdtemp(prefix="ms-shard-split-", dir=parent))
    try:
        w = LogWriter(d, fsync=False)
        shards = ShardFileWriter.open(w, n_shards, 0)
        t0 = time.perf_counter()
        for i in range(0, len(p), commit):
            w.append(p[i:i + commit], 1)
            w.commit()
        t = time.perf_counter() - t0
        w.close()
        if shards is not None:
            shards.close()
        return t
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Print the cost per million events."""
    ap = argparse.ArgumentParser(prog="python -m bench.shard_split", description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--commit", type=int, default=20_000, help="records per group commit")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, help="JSON file (default bench/out/shard-split-<UTC time>.json)")
    add_record_flag(ap)
    args = ap.parse_args(argv)
    machine, git = machine_summary(), git_info(ROOT)
    p = payloads(args.events)
    per_m = 1e3 * 1e6 / args.events
    parent = ROOT / ".state"
    parent.mkdir(exist_ok=True)
    base = min(time_log(p, 1, args.commit, parent) for _ in range(args.repeat))
    print(f"log append + commit, 1 shard (no shard files): {base * per_m:7.1f} ms per 1M events")
    ms_per_million = {1: round(base * per_m, 2)}
    for n in (2, 4):
        t = min(time_log(p, n, args.commit, parent) for _ in range(args.repeat))
        ms_per_million[n] = round(t * per_m, 2)
        print(f"log append + commit, {n} shards:                  {t * per_m:7.1f} ms per 1M events "
              f"(+{(t - base) * per_m:.1f})")
    out = write_result({
        "benchmark": "shard-split", "command": [sys.executable, *sys.argv],
        "settings": {"events": args.events, "commit": args.commit, "repeat": args.repeat},
        "machine": dict(machine, loadavg_at_end=list(os.getloadavg())), "git": git,
        "ms_per_million_events": ms_per_million}, args.out or result_path("shard-split", args.record))
    print(f"-> {shown(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
