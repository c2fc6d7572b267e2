"""The same input through this job and three peers, each checked exact, side by side.

    python -m bench.peers                                   # 1M NBBO + 1M orders, 2,000 symbols
    python -m bench.peers --systems python,replay --nbbo 200000 --orders 200000   # a quick look

Systems, each a fresh process on the same generated files (every NBBO file before any
order file, as `replay` sends them):

- `replay`: this project's `marketspread replay` (TCP ingress with fsync, Spark
  `local[*]`, exactly-once result files), the whole command.
- `python`: a plain single-process loop: `struct.iter_unpack` over the files, a dict of
  symbols, results packed with `struct`.
- `bytewax`: a bytewax dataflow (one worker): input partition -> `key_on` symbol ->
  `stateful_map` (the rule, state per symbol) -> sink.
- `pyspark`: a plain PySpark Structured Streaming job: the files decoded (numpy) into
  Parquet, `groupBy("symbol").applyInPandasWithState` (state per symbol), a Parquet sink,
  `availableNow`; Spark's defaults except one shuffle partition per core.

Each system writes Wallaroo OrderResult frames; the benchmark holds them, in order and
without their timestamps, to `engine.rule.reference_results` over the same files. It
prints events/s (input messages / the process' wall time) and wall time per system, and
writes `bench/out/peers-<UTC time>.json` (`--record`: bench/results/). A timing never
fails the run; a system that breaks or is not exact is reported as such (exit 1).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from engine.rule import WIDE_ABS, WIDE_REL, reference_results
from engine.wire.fixish import (NBBO_LEN, NBBO_TYPE, ORDER_LEN, ORDER_TYPE, RESULT_LEN, RESULT_STRUCT, decode_payload,
                                iter_frames, read_results)
from perf.sysinfo import git_info, machine_summary, package_version, session_usage

SYSTEMS = ("replay", "python", "bytewax", "pyspark")
RUN_TIMEOUT = 1800.0
CPU_SAMPLE_S = 0.2                 # how often a run's processes are read from /proc
# A frame with its u32 length, as the files hold it.
NBBO_FRAME = struct.Struct(">IB4s21sdd")
ORDER_FRAME = struct.Struct(">IBBI6s4sdd21s")
RESULT_FRAME = struct.Struct(">I" + RESULT_STRUCT.format[1:])
NEVER_QUOTED = (True, 0.0, 0.0)        # an unquoted symbol rejects, with bid and offer 0


@dataclass(frozen=True)
class SystemRun:
    """One system's run: times, CPU, and whether its results equal the reference."""
    system: str
    wall_s: float                  # the whole process, start-up included
    processing_s: float | None     # from the first input byte read to the results written (None: not reported)
    cpu_s: float                   # user + system of the run's session (JVM and workers too), sampled
    events: int
    events_per_s: float            # events / wall_s
    results: int
    exact: bool
    detail: str                    # first difference, or why it broke
    command: list[str]


# --------------------------------------------------------------------------- the rule, per message

def quote_state(bid: float, offer: float) -> tuple[bool, float, float]:
    """Return (reject, bid, offer) after a quote, as `reference_results` decides it."""
    diff = offer - bid
    mid = (bid + offer) / 2
    return (diff >= WIDE_ABS or (diff / mid >= WIDE_REL if mid != 0 else diff > 0), bid, offer)


def _frames(path: Path, frame: struct.Struct, length: int, kind: int):
    data = Path(path).read_bytes()
    if len(data) % frame.size:
        raise ValueError(f"{path}: not a whole number of {frame.size}-byte frames")
    for rec in frame.iter_unpack(data):
        if rec[0] != length or rec[1] != kind:
            raise ValueError(f"{path}: a frame of length {rec[0]}, type {rec[1]}")
        yield rec


def _write_results(out: Path, rows: list[tuple]) -> None:
    """Write (side, account, order_id, symbol, qty, price, bid, offer) rows as framed results."""
    ts = time.time_ns()
    with open(out, "wb") as f:
        f.write(b"".join(RESULT_FRAME.pack(RESULT_LEN, *r, ts) for r in rows))


# --------------------------------------------------------------------------- systems (child side)

def run_python(nbbo: list[Path], orders: list[Path], out: Path) -> None:
    """The plain loop: a dict of symbols, `struct` over whole files."""
    state: dict[bytes, tuple[bool, float, float]] = {}
    rows = []
    emit = rows.append
    for path in nbbo:
        for _, _, sym, _, bid, offer in _frames(path, NBBO_FRAME, NBBO_LEN, NBBO_TYPE):
            state[sym] = quote_state(bid, offer)
    get = state.get
    for path in orders:
        for _, _, side, account, oid, sym, qty, price, _ in _frames(path, ORDER_FRAME, ORDER_LEN, ORDER_TYPE):
            reject, bid, offer = get(sym, NEVER_QUOTED)
            if reject:
                emit((side, account, oid, sym, qty, price, bid, offer))
    _write_results(out, rows)


def run_bytewax(nbbo: list[Path], orders: list[Path], out: Path) -> None:
    """A bytewax dataflow: frames in, keyed by symbol, a stateful step, results out."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.testing import run_main

    batch = 8192
    files = [(p, NBBO_FRAME, NBBO_LEN, NBBO_TYPE) for p in nbbo] + \
            [(p, ORDER_FRAME, ORDER_LEN, ORDER_TYPE) for p in orders]

    class FramesPartition(StatefulSourcePartition):
        def __init__(self):
            self._it = ((seq, rec) for seq, rec in
                        enumerate(r for f in files for r in _frames(*f)))

        def next_batch(self):
            items = [x for _, x in zip(range(batch), self._it)]
            if not items:
                raise StopIteration
            return items

        def snapshot(self):
            return None

    class FramesSource(FixedPartitionedSource):
        def list_parts(self):
            return ["files"]

        def build_part(self, step_id, for_part, resume_state):
            return FramesPartition()

    collected: list[tuple] = []

    class ListPartition(StatelessSinkPartition):
        def write_batch(self, items):
            collected.extend(items)

    class ListSink(DynamicSink):
        def build(self, step_id, worker_index, worker_count):
            return ListPartition()

    def key(item):
        _, rec = item
        return (rec[2] if rec[1] == NBBO_TYPE else rec[5]).decode("ascii")

    def rule(state, item):
        seq, rec = item
        if rec[1] == NBBO_TYPE:
            return quote_state(rec[4], rec[5]), None
        reject, bid, offer = state or NEVER_QUOTED
        _, _, side, account, oid, sym, qty, price, _ = rec
        return state, ((seq, (side, account, oid, sym, qty, price, bid, offer)) if reject else None)

    flow = Dataflow("market_spread")
    s = op.input("frames", flow, FramesSource())
    s = op.key_on("symbol", s, key)
    s = op.stateful_map("rule", s, rule)
    s = op.filter_map("rejected", s, lambda kv: kv[1])
    op.output("out", s, ListSink())
    run_main(flow)
    collected.sort(key=lambda x: x[0])     # across keys a step may reorder; seq is arrival order
    _write_results(out, [r for _, r in collected])


PEER_EVENT_SCHEMA = ("seq long, kind byte, symbol string, a double, b double, side byte, account long, "
                     "order_id binary")
PEER_RESULT_SCHEMA = ("seq long, side byte, account long, order_id binary, symbol string, qty double, "
                      "price double, bid double, offer double")
PEER_STATE_SCHEMA = "reject boolean, bid double, offer double"
PARQUET_ROWS = 500_000                 # rows per input file = per micro-batch (maxFilesPerTrigger 1)


def _to_parquet(nbbo: list[Path], orders: list[Path], folder: Path) -> int:
    """Decode the files (numpy) into Parquet files of PARQUET_ROWS rows; return the event count."""
    import numpy as np
    import pandas as pd

    from engine.tools.generate import NBBO_FRAME as NBBO_DT
    from engine.tools.generate import ORDER_FRAME as ORDER_DT
    parts = []
    for paths, dt in ((nbbo, NBBO_DT), (orders, ORDER_DT)):
        for p in paths:
            a = np.fromfile(p, dtype=dt)
            if ((a["len"] != dt.itemsize - 4) | (a["type"] != (NBBO_TYPE if dt is NBBO_DT else ORDER_TYPE))).any():
                raise ValueError(f"{p}: a frame of another length or type")
            n = len(a)
            is_order = dt is ORDER_DT
            parts.append(pd.DataFrame({
                "kind": np.full(n, ORDER_TYPE if is_order else NBBO_TYPE, np.int8),
                "symbol": a["symbol"].astype("U4"),
                "a": (a["qty"] if is_order else a["bid"]).astype(np.float64),
                "b": (a["price"] if is_order else a["offer"]).astype(np.float64),
                "side": a["side"].astype(np.int8) if is_order else np.zeros(n, np.int8),
                "account": a["account"].astype(np.int64) if is_order else np.zeros(n, np.int64),
                "order_id": list(a["order_id"]) if is_order else [b""] * n,
            }))
    ev = pd.concat(parts, ignore_index=True)
    ev.insert(0, "seq", np.arange(len(ev), dtype=np.int64))
    folder.mkdir(parents=True)
    for i, lo in enumerate(range(0, len(ev), PARQUET_ROWS)):
        ev.iloc[lo:lo + PARQUET_ROWS].to_parquet(folder / f"part-{i:05d}.parquet", index=False)
    return len(ev)


def _peer_rule(key, pdfs, state):
    """applyInPandasWithState per symbol: the symbol's events of a batch, in seq order."""
    import numpy as np
    import pandas as pd

    from engine.rule import is_wide
    pdf = pd.concat(list(pdfs), ignore_index=True).sort_values("seq", kind="stable")
    reject, bid, offer = state.get if state.exists else NEVER_QUOTED
    quote = (pdf["kind"] == NBBO_TYPE).to_numpy()
    a, b = pdf["a"].to_numpy(), pdf["b"].to_numpy()
    last = np.maximum.accumulate(np.where(quote, np.arange(len(pdf)), -1))
    quoted = last >= 0
    at = np.maximum(last, 0)
    eff_reject = np.where(quoted, is_wide(a[at], b[at]), reject)
    eff_bid = np.where(quoted, a[at], bid)
    eff_offer = np.where(quoted, b[at], offer)
    state.update((bool(eff_reject[-1]), float(eff_bid[-1]), float(eff_offer[-1])))
    emit = ~quote & eff_reject
    rows = pdf[emit]
    yield pd.DataFrame({"seq": rows["seq"], "side": rows["side"], "account": rows["account"],
                        "order_id": rows["order_id"], "symbol": rows["symbol"], "qty": rows["a"],
                        "price": rows["b"], "bid": eff_bid[emit], "offer": eff_offer[emit]})


def run_pyspark(nbbo: list[Path], orders: list[Path], out: Path, work: Path, master: str) -> None:
    """A plain Structured Streaming job with state per symbol (applyInPandasWithState)."""
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName("peer-pyspark")
             .config("spark.sql.shuffle.partitions", str(os.cpu_count() or 1))
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    _to_parquet(nbbo, orders, work / "events")
    events = (spark.readStream.schema(PEER_EVENT_SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(work / "events")))
    results = events.groupBy("symbol").applyInPandasWithState(
        _peer_rule, PEER_RESULT_SCHEMA, PEER_STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)
    query = (results.writeStream.format("parquet").option("path", str(work / "out"))
             .option("checkpointLocation", str(work / "checkpoint")).outputMode("append")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    spark.stop()
    table = pq.read_table(work / "out").sort_by("seq")
    cols = [table.column(c).to_pylist() for c in ("side", "account", "order_id", "symbol", "qty", "price",
                                                     "bid", "offer")]
    cols[3] = [s.encode("ascii") for s in cols[3]]
    _write_results(out, list(zip(*cols)))


def child(args: argparse.Namespace) -> int:
    """Run one system in this process; write its own processing time to `--timing`."""
    t0 = time.monotonic()
    if args.system == "python":
        run_python(args.nbbo, args.orders, args.out)
    elif args.system == "bytewax":
        run_bytewax(args.nbbo, args.orders, args.out)
    elif args.system == "pyspark":
        run_pyspark(args.nbbo, args.orders, args.out, args.work, args.master)
    else:
        raise SystemExit(f"unknown system {args.system!r}")
    args.timing.write_text(json.dumps({"processing_s": time.monotonic() - t0}))
    return 0


# --------------------------------------------------------------------------- the benchmark

def system_command(system: str, nbbo: Path, orders: Path, out: Path, work: Path, master: str) -> list[str]:
    """The command line that runs `system` on the files."""
    if system == "replay":
        return [sys.executable, "-m", "marketspread", "replay", "--nbbo", str(nbbo), "--orders", str(orders),
                "--out", str(out), "--state-dir", str(work), "--master", master]
    return [sys.executable, "-m", "bench.peers", "_child", system, "--nbbo", str(nbbo),
            "--orders", str(orders), "--out", str(out), "--work", str(work), "--master", master,
            "--timing", str(work / "timing.json")]


def run_system(system: str, nbbo: Path, orders: Path, work: Path, master: str, events: int,
               reference: list[tuple]) -> SystemRun:
    """Run one system in a fresh process and check its results."""
    work.mkdir(parents=True)
    out = work / "results.msg"
    cmd = system_command(system, nbbo, orders, out, work, master)
    env = {k: v for k, v in os.environ.items() if k not in ("MS_INFLUX_URL", "MS_STATE_DIR")}
    env["PYTHONPATH"] = str(ROOT)
    log = open(work / "output.log", "w+")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    cpu_by_pid: dict[int, float] = {}
    try:
        while proc.poll() is None:
            # The session holds the JVM and its Python workers too; CPU is cumulative per process.
            cpu_by_pid.update(session_usage(proc.pid, time.time_ns()).cpu_s)
            if time.monotonic() - t0 > RUN_TIMEOUT:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(CPU_SAMPLE_S)
        wall = time.monotonic() - t0
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)      # anything of the run's session left behind
        except ProcessLookupError:
            pass
        proc.wait()
    cpu = sum(cpu_by_pid.values())
    log.seek(0)
    output = log.read()
    log.close()
    if system == "replay":
        lines = output.splitlines()
        at = next((i for i, ln in enumerate(lines) if ln.startswith("replay timing:")), len(lines))
        print("    " + "\n    ".join(lines[at:at + 8]))
    timing = work / "timing.json"
    processing = json.loads(timing.read_text())["processing_s"] if timing.exists() else None
    if proc.returncode != 0 or not out.exists():
        tail = " | ".join(output.strip().splitlines()[-3:])
        return SystemRun(system, wall, processing, cpu, events, events / wall, 0, False,
                         f"exit {proc.returncode}: {tail}", cmd)
    got = [tuple(r[:8]) for r in read_results(out.read_bytes())]
    exact, detail = compare(got, reference)
    return SystemRun(system, wall, processing, cpu, events, events / wall, len(got), exact, detail, cmd)


def compare(got: list[tuple], want: list[tuple]) -> tuple[bool, str]:
    """Return (equal, first difference) of two result lists."""
    if got == want:
        return True, f"{len(got):,} results equal the reference"
    i = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    return False, (f"{len(got):,} results vs {len(want):,} expected; first difference at {i}: "
                   f"{got[i] if i < len(got) else None} vs {want[i] if i < len(want) else None}")


def reference(nbbo: Path, orders: Path) -> tuple[int, list[tuple]]:
    """Count the messages and run `reference_results` over them in arrival order."""
    count = 0

    def messages():
        nonlocal count
        for f in (nbbo, orders):
            for p in iter_frames(Path(f).read_bytes()):
                count += 1
                yield decode_payload(p)
    want = reference_results(messages())
    return count, want


def table(runs: list[SystemRun]) -> str:
    """Format the runs as a Markdown table."""
    lines = ["| system | events/s (wall) | wall s | processing s | CPU s | results | exact |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        proc = f"{r.processing_s:.2f}" if r.processing_s is not None else "-"
        lines.append(f"| {r.system} | {r.events_per_s:,.0f} | {r.wall_s:.2f} | {proc} | {r.cpu_s:.1f} | "
                     f"{r.results:,} | {'yes' if r.exact else 'NO'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_child"]:
        p = argparse.ArgumentParser(prog="python -m bench.peers _child")
        p.add_argument("system")
        for flag in ("--nbbo", "--orders"):
            p.add_argument(flag, type=Path, action="append", required=True)
        for flag in ("--out", "--work", "--timing"):
            p.add_argument(flag, type=Path, required=True)
        p.add_argument("--master", default="local[*]")
        return child(p.parse_args(argv[1:]))
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    p.add_argument("--symbols", type=int, default=2000)
    p.add_argument("--nbbo", type=int, default=1_000_000, help="NBBO messages after one initial quote per symbol")
    p.add_argument("--orders", type=int, default=1_000_000)
    p.add_argument("--wide-share", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--master", default="local[*]", help="Spark master of replay and pyspark")
    p.add_argument("--state-dir", type=Path, help="work folder (default: a temp folder, removed)")
    p.add_argument("--keep", action="store_true", help="keep the work folder")
    p.add_argument("--out", type=Path, help="JSON file (default bench/out/peers-<UTC time>.json)")
    add_record_flag(p)
    args = p.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if bad := [s for s in systems if s not in SYSTEMS]:
        p.error(f"unknown system(s) {', '.join(bad)}; choose from {', '.join(SYSTEMS)}")
    from engine.tools.generate import generate

    state = args.state_dir or Path(tempfile.mkdtemp(prefix="ms-peers-"))
    state.mkdir(parents=True, exist_ok=True)
    machine, git = machine_summary(), git_info(ROOT)
    try:
        data = state / "data"
        nbbo, orders = data / "nbbo.msg", data / "orders.msg"
        gen = generate(nbbo, orders, symbols=args.symbols, nbbo=args.nbbo, orders=args.orders,
                       wide_share=args.wide_share, seed=args.seed)
        events, want = reference(nbbo, orders)
        print(f"peers: {gen.nbbo:,} NBBO + {gen.orders:,} orders, {gen.symbols:,} symbols; "
              f"reference {len(want):,} results; load average {os.getloadavg()[0]:.2f}")
        runs = []
        for system in systems:
            run = run_system(system, nbbo, orders, state / f"run-{system}", args.master, events, want)
            print(f"  {system:8s} {run.events_per_s:>12,.0f} events/s  {run.wall_s:7.2f} s wall  "
                  f"{'exact' if run.exact else 'NOT EXACT: ' + run.detail}")
            runs.append(run)
    finally:
        if not args.keep and args.state_dir is None:
            shutil.rmtree(state, ignore_errors=True)
    print()
    print(table(runs))
    out = write_result({
        "benchmark": "peers", "command": [sys.executable, *sys.argv],
        "input": {"symbols": gen.symbols, "nbbo": gen.nbbo, "orders": gen.orders,
                  "wide_share": args.wide_share, "seed": args.seed, "events": events},
        "master": args.master, "machine": dict(machine, loadavg_at_end=list(os.getloadavg())), "git": git,
        "versions": {"bytewax": package_version("bytewax"), "pyspark": package_version("pyspark")},
        "runs": [asdict(r) for r in runs]}, args.out or result_path("peers", args.record))
    print(f"\n-> {shown(out)}")
    return 0 if all(r.exact for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
