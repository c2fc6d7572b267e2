"""What the latency metrics cost: the same job and input with metrics on and off, alternated.

The requirements: metrics on against off, throughput ratio at least 0.98 and p99
end-to-end latency within 5 %; and, as for any job the monitor follows, p99 batch
duration within 3 % (read from Spark's checkpoint: offset log entry to commit log entry,
the same whether the job's metrics are on or off).

    python -m bench.metrics_overhead                       # 4 pairs of each mode, 30 s measured (~22 min)
    python -m bench.metrics_overhead throughput --pairs 5
    python -m bench.metrics_overhead --pairs 1 --duration 10 --warmup 5   # a quick look

One real InfluxDB server runs for the whole benchmark; its URL is in `MS_INFLUX_URL` of
every process. Each pair runs perf/e2e.py's whole path twice, metrics off (`--no-metrics` on
the ingress and the job) and on, each time with a fresh state dir, fresh processes and
the same generated input; pairs run throughput then latency, so on and off of a pair are
neighbours in time. Odd pairs run off first, even pairs on first (ABBA): with the off arm
always first, a drift within each pair counted against the metrics. A pair's two runs go
back to back and are checked after both: a throughput run's exactness check takes longer
than the run (~2 min for 60M events), and a shared machine's saturated throughput drifts
15-20 % over minutes. Each run starts with the page cache written back (`os.sync`), so no
run shares the disk with the writeback of the gigabytes of log the run before it wrote. The
second throughput run of a pair was still the slower one in 6 of 7 pairs over two sittings,
in either order (by 4-22 %): the default of 4 pairs runs as many of each order. Every run is checked for exactness (perf/exactness.py) and for its
metrics: a metrics-on run must leave in InfluxDB, under its run id, a `count` per step
equal to the events it handled; a metrics-off run must leave nothing. Figures are printed
and written to `bench/out/` (`bench/results/` with `--record`); no figure ever fails the
benchmark (exit 0), a run that broke or failed a check does (exit 1).
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from bench.output import ROOT, add_record_flag, result_path, shown, write_result
from collector.influx import InfluxClient, InfluxError
from collector.influx.server import InfluxServer
from collector.samples import STEP_CHECK, STEP_E2E, STEP_INGRESS, STEP_SINK, STEP_SOURCE
from perf import e2e
from perf.exactness import ExactnessFigures
from perf.metrics_pool import (BATCH_P99_FIGURE, BATCH_P99_MAX_RATIO, CPU_FIGURE, CPU_MAX_RATIO, P99_MAX_RATIO,
                               THROUGHPUT_FIGURE, THROUGHPUT_MIN_RATIO)
from perf.fleet import signals_ignored
from perf.sysinfo import cpu_percent, git_info, machine_summary, session_usage

ARMS = ("off", "on")                  # run order within odd pairs (even pairs: reversed)
OFF_ARGS = ("--no-metrics",)          # on the ingress's and the job's command lines
DEFAULT_WARMUP = 20.0                 # seconds, both modes (see `configs`)
METRICS_WAIT = 30.0                   # seconds for a stopped run's points to be queryable
_SUMS_QUERY = 'SELECT sum("count") FROM "latency" WHERE "run" = $run GROUP BY "step"'
_RUN_POINTS_QUERY = 'SELECT count("count") FROM "latency" WHERE "run" = $run'
_ALL_POINTS_QUERY = 'SELECT count("count") FROM "latency"'


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class MetricsCheck:
    """What a run left in InfluxDB: per-step event counts (on), or nothing at all (off)."""
    run_id: str | None                 # <state dir>/run_id; an off run must not create one
    points: int                        # latency points of the run id (on), points added (off)
    step_counts: dict[str, int]        # sum of `count` per step, for the run id
    expected: dict[str, int]           # what the exactness figures say each step handled
    ok: bool
    problem: str | None


@dataclass(frozen=True)
class ArmRun:
    """One run of one mode, metrics on or off."""
    mode: str
    pair: int                          # 1-based
    arm: str                           # "on" or "off"
    result: e2e.ModeResult
    processed_commits: float           # events/s from the window's first commit to its last
    batch_p99_ms: float                # p99 of the window's batch durations, offset log to commit log
    metrics: MetricsCheck
    wall_s: float                      # the run and its checks (not the other arm's run between)
    loadavg_start: list[float]
    loadavg_end: list[float]
    influxdb_cpu: float = float("nan")  # the InfluxDB server's CPU over the whole run, % of a core

    @property
    def ok(self) -> bool:
        return self.result.exactness.exact and self.metrics.ok


@dataclass(frozen=True)
class Comparison:
    """One figure, metrics on against off, per pair and overall (ratio = on / off)."""
    figure: str
    off: list[float]                   # per pair
    on: list[float]
    ratios: list[float]
    median_ratio: float                # median of the per-pair ratios: the headline
    ratio_of_medians: float
    min_ratio: float
    max_ratio: float
    off_spread: float                  # (max - min) / median of the off runs: noise between equal runs


@dataclass(frozen=True)
class Verdict:
    """Whether a figure meets the requirement (information only, never the exit code)."""
    requirement: str
    comparison: str                    # the Comparison.figure it reads
    value: float                       # its median of per-pair ratios
    met: bool


# --------------------------------------------------------------------------- figures (pure)

def _median(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return float(np.median(xs)) if xs else float("nan")


def _ratio(on: float, off: float) -> float:
    return on / off if off and not (math.isnan(on) or math.isnan(off)) else float("nan")


def compare(figure: str, off: list[float], on: list[float]) -> Comparison:
    """Compare one figure over pairs: per-pair ratios, their median, the ratio of medians."""
    ratios = [_ratio(b, a) for a, b in zip(off, on)]
    both = [(a, b, r) for a, b, r in zip(off, on, ratios) if not math.isnan(r)]   # pairs with the figure
    finite = [r for _, _, r in both] or [float("nan")]
    off_ok, on_ok = [a for a, _, _ in both], [b for _, b, _ in both]
    spread = (max(off_ok) - min(off_ok)) / _median(off_ok) if len(off_ok) > 1 and _median(off_ok) else float("nan")
    return Comparison(figure, [round(x, 3) for x in off], [round(x, 3) for x in on],
                      [round(r, 4) for r in ratios], round(_median(ratios), 4),
                      round(_ratio(_median(on_ok), _median(off_ok)), 4), round(min(finite), 4),
                      round(max(finite), 4), round(spread, 4))


def _latency(res: e2e.ModeResult, basis: str, pct: str) -> float:
    lat = res.latency_committed if basis == "committed" else res.latency_written
    return float(getattr(lat, f"{pct}_ms")) if lat else float("nan")


def _cadence(res: e2e.ModeResult, name: str) -> float:
    value = getattr(res.cadence, name) if res.cadence else None
    return float(value) if value is not None else float("nan")


def commit_rate(ids: np.ndarray, commit_ns: np.ndarray, ends: dict[int, int], start_ns: int,
                end_ns: int) -> float:
    """Events/s from the first to the last batch committed in [start_ns, end_ns].

    The 1-s samples of `consumed` move a whole batch at a time (500,000 records at full
    load), so a 30-s window's mean is only good to a batch, several per cent; between two
    commits the count and the time are both exact.
    """
    sel = [(t, ends[b]) for b, t in zip(ids.tolist(), commit_ns.tolist()) if start_ns <= t <= end_ns and b in ends]
    if len(sel) < 2 or sel[-1][0] == sel[0][0]:
        return float("nan")
    return (sel[-1][1] - sel[0][1]) / ((sel[-1][0] - sel[0][0]) / 1e9)


def run_commit_rate(run_dir: Path, res: e2e.ModeResult) -> float:
    """`commit_rate` over a finished run's measurement window (read before its folder goes)."""
    ids, commit_ns, _ = e2e.batch_times(run_dir)
    ends = e2e.batch_end_offsets(run_dir)
    start_ns = next(s for s in res.samples if s.t >= res.config.warmup - 1e-6).wall_ns
    return commit_rate(ids, commit_ns, ends, start_ns, res.samples[-1].wall_ns)


def run_batch_p99(run_dir: Path, res: e2e.ModeResult) -> float:
    """p99 batch duration (ms) over a finished run's measurement window, from Spark's checkpoint logs."""
    start_ns = next(s for s in res.samples if s.t >= res.config.warmup - 1e-6).wall_ns
    durations = e2e.batch_durations_ms(run_dir, start_ns, res.samples[-1].wall_ns)
    return float(np.percentile(durations, 99, method="higher")) if len(durations) else float("nan")


def arm_order(pair: int) -> tuple[str, ...]:
    """The arms of a pair in run order: off first in odd pairs, on first in even ones (an even number
    of pairs balances what a run's place in its pair does to it)."""
    return ARMS if pair % 2 else ARMS[::-1]


def cpu_per_million(r: ArmRun) -> float:
    """CPU seconds of every process (InfluxDB too) per million events processed in the window."""
    if not r.result.cpu or not r.result.throughput.processed_mean:
        return math.nan
    cores = (sum(r.result.cpu.values()) + (0.0 if math.isnan(r.influxdb_cpu) else r.influxdb_cpu)) / 100
    return cores / r.result.throughput.processed_mean * 1e6


def mode_comparisons(runs: list[ArmRun], mode: str) -> list[Comparison]:
    """Compare the complete pairs of one mode: throughput figures, then latency percentiles."""
    by = {(r.pair, r.arm): r for r in runs if r.mode == mode}
    pairs = sorted(p for p, arm in by if arm == "on" and (p, "off") in by)
    if not pairs:
        return []
    figures = [(THROUGHPUT_FIGURE, lambda r: r.processed_commits),
               ("processed events/s (mean)", lambda r: r.result.throughput.processed_mean),
               ("processed events/s (median of 5-s)", lambda r: r.result.throughput.processed_median_5s)]
    for basis in ("committed", "written"):
        for pct in ("p50", "p99"):
            figures.append((f"{pct} latency to {basis} (ms)",
                            lambda r, b=basis, q=pct: _latency(r.result, b, q)))
    figures += [(BATCH_P99_FIGURE, lambda r: r.batch_p99_ms),
                ("batch gap median (ms)", lambda r: _cadence(r.result, "gap_median_ms")),
                ("records per batch median", lambda r: _cadence(r.result, "records_per_batch_median")),
                ("job CPU (% of a core)", lambda r: r.result.cpu.get("job", math.nan)),
                ("all CPU incl. InfluxDB (% of a core)",
                 lambda r: sum(r.result.cpu.values()) + (0.0 if math.isnan(r.influxdb_cpu) else r.influxdb_cpu)
                 if r.result.cpu else math.nan),
                (CPU_FIGURE, cpu_per_million)]
    return [compare(name, [get(by[p, "off"]) for p in pairs], [get(by[p, "on"]) for p in pairs])
            for name, get in figures]


def verdicts(mode: str, comps: list[Comparison]) -> list[Verdict]:
    """Read the requirement off a mode's comparisons: throughput in throughput mode, p99 in latency mode."""
    by = {c.figure: c for c in comps}
    out = []
    if mode == "throughput" and THROUGHPUT_FIGURE in by:
        c = by[THROUGHPUT_FIGURE]
        out.append(Verdict(f"throughput on/off >= {THROUGHPUT_MIN_RATIO}", c.figure, c.median_ratio,
                           c.median_ratio >= THROUGHPUT_MIN_RATIO))
    if mode == "throughput" and BATCH_P99_FIGURE in by:
        c = by[BATCH_P99_FIGURE]
        out.append(Verdict(f"p99 batch duration on/off <= {BATCH_P99_MAX_RATIO}", c.figure, c.median_ratio,
                           c.median_ratio <= BATCH_P99_MAX_RATIO))
    if CPU_FIGURE in by:
        c = by[CPU_FIGURE]
        out.append(Verdict(f"CPU per million events on/off <= {CPU_MAX_RATIO}", c.figure, c.median_ratio,
                           c.median_ratio <= CPU_MAX_RATIO))
    if mode == "latency":
        for basis in ("committed", "written"):
            c = by.get(f"p99 latency to {basis} (ms)")
            if c:
                out.append(Verdict(f"p99 to {basis} on/off <= {P99_MAX_RATIO}", c.figure, c.median_ratio,
                                   c.median_ratio <= P99_MAX_RATIO))
    return out


# --------------------------------------------------------------------------- InfluxDB checks

def expected_counts(ex: ExactnessFigures) -> dict[str, int]:
    """Events each step must have counted in a run (every logged event once; sink: each result)."""
    counts = {STEP_INGRESS: ex.head, STEP_SOURCE: ex.consumed, STEP_CHECK: ex.consumed,
              STEP_E2E: ex.consumed, STEP_SINK: ex.committed}
    return {step: n for step, n in counts.items() if n}      # a step with no events writes no point


def step_counts(client: InfluxClient, run_id: str) -> dict[str, int]:
    """Return the sum of `count` per step of a run's latency points."""
    return {s.tags["step"]: int(s.values[0][1]) for s in client.query(_SUMS_QUERY, params={"run": run_id})}


def point_count(client: InfluxClient, run_id: str | None = None) -> int:
    """Return how many latency points the server holds (of one run, or of all)."""
    res = (client.query(_RUN_POINTS_QUERY, params={"run": run_id}) if run_id
           else client.query(_ALL_POINTS_QUERY))
    return int(res[0].values[0][1]) if res and res[0].values else 0


def check_metrics_on(client: InfluxClient, run_dir: Path, ex: ExactnessFigures) -> MetricsCheck:
    """Wait until the run's per-step counts in InfluxDB equal its events; say what differs if not."""
    try:
        run_id = (run_dir / "run_id").read_text().strip()
    except OSError:
        return MetricsCheck(None, 0, {}, expected_counts(ex), False, "the run left no run_id file")
    expected = expected_counts(ex)
    deadline = time.monotonic() + METRICS_WAIT
    while True:       # the job flushes its writer before it exits, so this is normally at once
        counts = step_counts(client, run_id)
        if counts == expected or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    problem = None
    if counts != expected:
        diffs = [f"{s}: {counts.get(s, 0):,} counted, {n:,} expected" for s, n in expected.items()
                 if counts.get(s, 0) != n]
        diffs += [f"{s}: {n:,} counted, none expected" for s, n in counts.items() if s not in expected]
        problem = "; ".join(diffs)
    return MetricsCheck(run_id, point_count(client, run_id), counts, expected, problem is None, problem)


def check_metrics_off(client: InfluxClient, run_dir: Path, points_before: int) -> MetricsCheck:
    """Check that a metrics-off run wrote no point and made no run id or spool."""
    added = point_count(client) - points_before
    made = [name for name in ("run_id", "metrics-spool") if (run_dir / name).exists()]
    problems = ([f"{added:,} latency points written"] if added else []) + \
               [f"{name} created" for name in made]
    return MetricsCheck(None, added, {}, {}, not problems, "; ".join(problems) or None)


# --------------------------------------------------------------------------- runs

@dataclass(frozen=True)
class RecordedArm:
    """One arm run and its processes stopped, its figures and checks still to take (`finish_arm`)."""
    pair: int
    arm: str
    recorded: e2e.RecordedRun
    off_check: MetricsCheck | None     # an off run's check, taken before the next run writes any point
    run_s: float                       # start of the processes to the off check's end
    loadavg_start: list[float]
    influxdb_cpu: float


def record_arm(cfg: e2e.BenchConfig, pair: int, arm: str, files: dict[str, Path], state_dir: Path,
               client: InfluxClient, influx_pid: int | None = None) -> RecordedArm:
    """Run one mode once with metrics on or off; check at once that an off run wrote nothing."""
    run_dir = state_dir / f"run-{cfg.mode}-{pair}-{arm}"
    # The same environment in both arms; only the flag differs. A user's MS_METRICS=0
    # must not turn the on arm off (the command line wins over it in the off arm).
    env = {**client.config.as_env(), "MS_METRICS": "true"}
    # The pair's other run wrote gigabytes of log just before: written back now, not during this run.
    os.sync()
    load0, t0 = list(os.getloadavg()), time.monotonic()
    points_before = point_count(client) if arm == "off" else 0
    # influxd runs in a session of its own (collector.influx.server), so its pid is the session id
    influx0 = session_usage(influx_pid, time.time_ns()) if influx_pid else None
    rec = e2e.record_mode(cfg, files, run_dir, extra_args=OFF_ARGS if arm == "off" else (), env=env)
    influx_cpu = (cpu_percent(influx0, session_usage(influx_pid, time.time_ns())) if influx0 is not None
                  else math.nan)
    off_check = check_metrics_off(client, run_dir, points_before) if arm == "off" else None
    return RecordedArm(pair, arm, rec, off_check, time.monotonic() - t0, load0, round(influx_cpu, 1))


def finish_arm(r: RecordedArm, client: InfluxClient, keep: bool) -> ArmRun:
    """Take a recorded arm's figures; check its results' exactness and (on) its metrics."""
    t0 = time.monotonic()
    res = e2e.mode_result(r.recorded)
    run_dir = r.recorded.run_dir
    check = r.off_check if r.off_check is not None else check_metrics_on(client, run_dir, res.exactness)
    rate, batch_p99 = run_commit_rate(run_dir, res), run_batch_p99(run_dir, res)
    if not keep:                       # a throughput run's log is gigabytes
        shutil.rmtree(run_dir, ignore_errors=True)
    return ArmRun(res.config.mode, r.pair, r.arm, res, round(rate, 1), round(batch_p99, 1), check,
                  round(r.run_s + time.monotonic() - t0, 1), r.loadavg_start, list(os.getloadavg()), r.influxdb_cpu)


def run_line(r: ArmRun) -> str:
    """One line saying what a run measured and whether its checks passed."""
    res, ex = r.result, r.result.exactness
    lat = res.latency_committed
    lat_s = f"p50 {lat.p50_ms:,.0f} ms, p99 {lat.p99_ms:,.0f} ms to committed" if lat else "no latency"
    if r.arm == "on":
        m = f"metrics {'ok' if r.metrics.ok else 'WRONG'} ({r.metrics.points:,} points, run {r.metrics.run_id})"
    else:
        m = f"metrics {'none, ok' if r.metrics.ok else 'WRONG'}"
    bad = "".join(f"; {p}" for p in (ex.first_difference if not ex.exact else None, r.metrics.problem) if p)
    return (f"{r.mode} pair {r.pair} metrics {r.arm}: {r.processed_commits:,.0f} events/s, "
            f"p99 batch {r.batch_p99_ms:,.0f} ms, {lat_s}; "
            f"exact {ex.exact}; {m}; {r.wall_s:.0f} s{bad}")


# --------------------------------------------------------------------------- report

def report(runs: list[ArmRun], modes: list[str]) -> str:
    """Format the per-pair tables and the overall ratios of every mode."""
    out = []
    for mode in modes:
        comps = mode_comparisons(runs, mode)
        if not comps:
            continue
        pairs = len(comps[0].ratios)
        cfg = next(r.result.config for r in runs if r.mode == mode)
        offered = f"{cfg.rate:,} events/s offered" if cfg.rate else "unthrottled senders"
        out.append(f"\nmetrics overhead, {mode} ({offered}; {pairs} pair{'s' * (pairs != 1)}, "
                   f"{cfg.duration:g} s measured after {cfg.warmup:g} s warm-up; ratio = on / off)")
        if mode == "throughput":
            shown = [c for c in comps if c.figure.startswith(("processed", "batch", "records", "job", "all"))]
        else:                          # latencies, then: did the job keep up with the offered rate?
            shown = ([c for c in comps if c.figure.startswith(("p50", "p99", "batch", "records"))] + comps[:1]
                     + [c for c in comps if c.figure.startswith(("job", "all"))])
        for c in shown:
            out.append(f"  {c.figure}")
            out.append(f"    {'pair':>4}  {'off':>12}  {'on':>12}  {'on/off':>7}")
            for i, (a, b, q) in enumerate(zip(c.off, c.on, c.ratios), 1):
                out.append(f"    {i:>4}  {a:>12,.1f}  {b:>12,.1f}  {q:>7.3f}")
            out.append(f"    median of pair ratios {c.median_ratio:.3f} (range {c.min_ratio:.3f}-"
                       f"{c.max_ratio:.3f}), ratio of medians {c.ratio_of_medians:.3f}"
                       + ("" if math.isnan(c.off_spread) else f"; off runs spread {c.off_spread:.1%}"))
        for v in verdicts(mode, comps):
            out.append(f"  requirement {v.requirement}: {v.value:.3f} -> {'met' if v.met else 'NOT met'}")
    return "\n".join(out)


def write_json(runs: list[ArmRun], modes: list[str], args: argparse.Namespace, machine: dict, git: dict,
               influx: dict, argv: list[str], error: str | None) -> Path:
    """Write every run, the comparisons, machine, commit and command line (to bench/out/ or, --record, bench/results/)."""
    path = result_path("metrics-overhead", args.record)
    stamp = path.stem.rsplit("-", 1)[-1]
    summary = {}
    for mode in modes:
        comps = mode_comparisons(runs, mode)
        summary[mode] = {"comparisons": [asdict(c) for c in comps],
                         "verdicts": [asdict(v) for v in verdicts(mode, comps)]}
    doc = {"benchmark": "metrics-overhead", "utc": stamp, "command": shlex.join([sys.executable, *argv]),
           "git": git, "machine": dict(machine, loadavg_at_end=list(os.getloadavg())),
           "settings": {"modes": modes, "pairs": args.pairs, "arms_order": "off, on in odd pairs; on, off in even pairs",
                        "off_args": list(OFF_ARGS), "throughput_min_ratio": THROUGHPUT_MIN_RATIO,
                        "p99_max_ratio": P99_MAX_RATIO, "batch_p99_max_ratio": BATCH_P99_MAX_RATIO},
           "influxdb": influx, "complete": error is None, "error": error,
           "all_checks_ok": all(r.ok for r in runs), "summary": summary,
           "runs": [_run_doc(r) for r in runs]}
    return write_result(_nan_to_none(doc), path)


def _nan_to_none(x):
    """Replace NaN (a figure that could not be computed) with null, which JSON has."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_nan_to_none(v) for v in x]
    return x


def _run_doc(r: ArmRun) -> dict:
    res = r.result
    return {"mode": r.mode, "pair": r.pair, "arm": r.arm, "ok": r.ok, "wall_s": r.wall_s,
            "processed_commits": r.processed_commits,
            "loadavg_start": r.loadavg_start, "loadavg_end": r.loadavg_end,
            "config": asdict(res.config), "startup": asdict(res.startup), "throughput": asdict(res.throughput),
            "latency_written": res.latency_written and asdict(res.latency_written),
            "latency_committed": res.latency_committed and asdict(res.latency_committed),
            "cadence": res.cadence and asdict(res.cadence), "exactness": asdict(res.exactness),
            "metrics": asdict(r.metrics), "cpu_percent_of_core": res.cpu, "influxdb_cpu_percent": r.influxdb_cpu,
            "samples": [asdict(x) for x in res.samples]}


# --------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    """Return the benchmark's argument parser (bench/e2e.py's flags, plus --pairs)."""
    p = argparse.ArgumentParser(prog="python -m bench.metrics_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="all", choices=("throughput", "latency", "all"),
                   help="which runs to pair (default all: throughput, then latency, in each pair)")
    p.add_argument("--pairs", type=int, default=4, help="off/on pairs per mode (4: as many of each order)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds measured after the warm-up (30)")
    p.add_argument("--warmup", type=float, help="seconds before measuring, both modes (20)")
    e2e.add_job_arguments(p)
    p.add_argument("--state-dir", type=Path, help="where input, InfluxDB and runs go (default: a temp folder)")
    p.add_argument("--keep", action="store_true", help="keep every run's folder and the InfluxDB data")
    add_record_flag(p)
    return p


def configs(args: argparse.Namespace, state_dir: Path) -> list[e2e.BenchConfig]:
    """Return the e2e configs of the chosen modes, with this benchmark's warm-up."""
    # 20 s in both modes: with metrics on the job's first batches are slower, and its
    # latency settled only ~18 s after the first commit (off: ~5 s) in trial runs.
    return [replace(c, warmup=DEFAULT_WARMUP if args.warmup is None else args.warmup)
            for c in e2e.mode_configs(args, state_dir)]


def main(argv: list[str] | None = None) -> int:
    """Alternate metrics off and on over pairs of runs; print and write the comparison."""
    argv = sys.argv if argv is None else argv
    args = build_parser().parse_args(argv[1:])
    if args.pairs < 1 or args.duration < e2e.WINDOW * e2e.SAMPLE_EVERY or (args.warmup or 0) < 0:
        raise SystemExit(f"metrics_overhead: --pairs >= 1, --duration >= {e2e.WINDOW * e2e.SAMPLE_EVERY:g} s, "
                         "--warmup >= 0")
    signal.signal(signal.SIGTERM, e2e.raise_interrupt)
    temp = args.state_dir is None
    state_dir = (Path(tempfile.mkdtemp(prefix="ms-metrics-overhead-")) if temp else args.state_dir).resolve()
    machine, git = machine_summary(), git_info(ROOT)
    cfgs = configs(args, state_dir)
    modes = [c.mode for c in cfgs]
    runs: list[ArmRun] = []
    error, code = None, 0
    server = InfluxServer(state_dir / "influx", port=0)
    influx: dict = {}
    try:
        status = server.start()
        influx = {"url": status.url, "version": status.version, "db": server.db}
        client = server.client()
        print(f"metrics_overhead: InfluxDB {status.version} at {status.url}; {args.pairs} pair(s) of "
              f"{', '.join(modes)}; state in {state_dir}", flush=True)
        nbbo, orders = e2e.ensure_input(state_dir / "data", args.symbols, wide_share=args.wide_share)
        files = {"nbbo": nbbo, "orders": orders}
        total = args.pairs * len(cfgs) * len(ARMS)
        for pair in range(1, args.pairs + 1):
            for cfg in cfgs:
                # The pair's two runs back to back, their checks after both: a throughput run's
                # exactness check takes longer than the run, and the machine drifts meanwhile.
                recorded = []
                for arm in arm_order(pair):
                    print(f"\nmetrics_overhead: run {len(runs) + len(recorded) + 1} of {total}: {cfg.mode}, "
                          f"pair {pair}, metrics {arm}", flush=True)
                    recorded.append(record_arm(cfg, pair, arm, files, state_dir, client, status.pid))
                for r in recorded:
                    runs.append(finish_arm(r, client, args.keep))
                    print(f"metrics_overhead: {run_line(runs[-1])}", flush=True)
        client.close()
    except KeyboardInterrupt:
        error, code = "interrupted", 130
        print("metrics_overhead: interrupted; all processes stopped", file=sys.stderr)
    except (RuntimeError, TimeoutError, InfluxError) as e:
        error, code = f"run failed: {e}", 1
        print(f"metrics_overhead: {error}", file=sys.stderr)
    finally:
        with signals_ignored():
            server.stop()
        e2e.cleanup(state_dir, temp, args.keep)
        if not (temp or args.keep):        # a given state dir keeps its input, not this run's InfluxDB
            shutil.rmtree(server.root, ignore_errors=True)
    failed = [r for r in runs if not r.ok]
    if failed and code == 0:
        code = 1
        error = f"{len(failed)} run(s) failed a check"
    if runs:
        print(report(runs, modes))
        path = write_json(runs, modes, args, machine, git, influx, argv, error)
        print(f"\nmetrics_overhead (commit {git['commit']}{', dirty' if git['dirty'] else ''}): "
              f"{len(runs)} runs, {'all checks ok' if not failed else f'{len(failed)} FAILED a check'}"
              f"\n  -> {shown(path)}", flush=True)
        for r in failed:
            print(f"metrics_overhead: FAILED {run_line(r)}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
