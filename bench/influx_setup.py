"""What authentication and auto-created databases cost: server start-ups and first writes.

    python -m bench.influx_setup [--repeat 5] [--points 1000]

Each round starts a fresh project InfluxDB (`InfluxServer`, free loopback port, a new
state folder): the first start generates the admin credentials, creates the admin user
and the database; a restart only checks them. Then a writer sends `--points` points to a
database that does not exist yet (the writer creates it with the retention policies and
resends) and the same number to an existing one. Medians, minima and maxima are printed
and written to bench/out/influx-setup-<UTC>.json (`--record`: bench/results/); never
fails on a figure.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from bench.output import add_record_flag, result_path, shown, write_result
from collector.influx import InfluxClient, InfluxWriter, Point
from collector.influx.server import InfluxServer


def _write_seconds(server: InfluxServer, db: str, spool: Path, n: int) -> float:
    """Time from add() to a flushed writer for `n` points to `db`."""
    with InfluxWriter(InfluxClient(server.config(db=db)), spool, interval=0.001) as w:
        t0 = time.perf_counter()
        w.add([Point("m", {}, {"v": j}, time.time_ns() - 10**9 + j) for j in range(n)])
        if not w.flush(30):
            raise RuntimeError(f"writer did not flush: {w.stats()}")
        return time.perf_counter() - t0


def measure(repeat: int, points: int) -> dict[str, list[float]]:
    """Run the rounds; return the seconds of each phase per round."""
    out: dict[str, list[float]] = {"first_start": [], "restart": [], "new_database_write": [],
                                   "existing_database_write": []}
    for _ in range(repeat):
        state = Path(tempfile.mkdtemp(prefix="influx-setup-"))
        server = InfluxServer(state, port=0)
        try:
            t0 = time.perf_counter()
            server.start()
            out["first_start"].append(time.perf_counter() - t0)
            server.stop()
            t0 = time.perf_counter()
            server.start()
            out["restart"].append(time.perf_counter() - t0)
            out["new_database_write"].append(
                _write_seconds(server, "new_" + uuid.uuid4().hex[:8], state / "spool-new", points))
            out["existing_database_write"].append(_write_seconds(server, server.db, state / "spool-old", points))
        finally:
            server.stop()
            shutil.rmtree(state, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure, print, write the JSON."""
    ap = argparse.ArgumentParser(prog="python -m bench.influx_setup", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--points", type=int, default=1000)
    add_record_flag(ap)
    args = ap.parse_args(argv)
    runs = measure(max(1, args.repeat), max(1, args.points))
    summary = {k: {"median_ms": statistics.median(v) * 1e3, "min_ms": min(v) * 1e3, "max_ms": max(v) * 1e3}
               for k, v in runs.items()}
    for k, s in summary.items():
        print(f"{k:>24}: median {s['median_ms']:.0f} ms (min {s['min_ms']:.0f}, max {s['max_ms']:.0f})")
    path = write_result({"args": vars(args), "summary": summary, "runs": runs},
                        result_path("influx-setup", args.record))
    print(f"written to {shown(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
