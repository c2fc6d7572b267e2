"""The `marketspread ingress` process: the ingress server until a signal, with its metrics.

The server (engine/ingress/server.py) knows nothing of InfluxDB; this entry point wires
its group commits and counters to the metrics writer, as the job's runner does for the job.
"""
from __future__ import annotations

import signal
import sys
import threading
import time

from collector.influx import InfluxConfig
from engine.config import Config
from engine.ingress.server import IngressServer
from engine.output.metrics_shipper import run_id_for
from marketspread.metrics_wiring import IngressMetrics, open_writer


#: How long the receive loop may wait for the GIL while another thread of this process
#: (metrics, their writer, the progress line) runs Python code; CPython's default is 5 ms.
#: The loop gives the GIL up at every recv, write and fsync, and took it back only after
#: a metrics thread's 5 ms: at 50k events/s with metrics on, receive to group commit
#: p99.9 8.4/7.7 ms against 5.5/5.2 ms off; at 0.2 ms, 5.7/6.2 ms (docs/PERFORMANCE.md,
#: "Design decisions": the ingress' receive loop waits at most 0.2 ms for the GIL).
SWITCH_INTERVAL_S = 0.0002


def run_ingress(cfg: Config, progress_every: float = 5.0, influx: InfluxConfig | None = None) -> int:
    """Serve the ingress until SIGTERM/SIGINT, printing a progress line every few seconds while it works.

    Its output stays bounded in rate whatever senders do: at most one progress line per
    `progress_every` s, one connection summary a minute, each warning once per 5 s
    (engine/ingress/connlog.py); each connection's own lines are DEBUG (`marketspread -v`).

    Metrics go to `influx`, which the CLI built; a library caller giving none (a test) gets `MS_INFLUX_*`'s.
    """
    if influx is None and cfg.metrics:
        influx = InfluxConfig.from_env()
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        return _serve(cfg, progress_every, influx)
    finally:
        sys.setswitchinterval(switch_interval)


def _quiet_since(last, st) -> bool:
    """Nothing a progress line shows changed: no message, bad run or connection, same backlog and state."""
    return (st.accepted_total, st.bad_total, st.backlog, st.muted, st.disk_full, st.connections_open,
            st.connections_total) == (last.accepted_total, last.bad_total, last.backlog, last.muted,
                                      last.disk_full, last.connections_open, last.connections_total)


def _serve(cfg: Config, progress_every: float, influx: InfluxConfig | None) -> int:
    server = IngressServer(cfg)
    metrics = writer = None
    if cfg.metrics:
        writer = open_writer(cfg.state_dir, "ingress", influx)
        metrics = IngressMetrics(run_id_for(cfg.state_dir), writer, server.stats).start()
        server.on_commit = metrics.on_commit
    server.start()
    stop = threading.Event()
    old = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    last, t_last = server.stats(), time.monotonic()
    try:
        while not stop.wait(0.2) and server.error is None and not server._done.is_set():
            now = time.monotonic()
            if now - t_last < progress_every:
                continue
            st = server.stats()
            if _quiet_since(last, st):       # an idle ingress prints nothing: its output grows with its work
                t_last = now
                continue
            rate = (st.accepted_total - last.accepted_total) / (now - t_last)
            print(f"ingress: {rate:,.0f} msgs/s, {st.accepted_total:,} accepted, {st.bad_total} bad, "
                  f"backlog {st.backlog:,}{' MUTED' if st.muted else ''}{' (DISK FULL)' if st.disk_full else ''}, "
                  f"{sum(st.connections_open.values())} connections", flush=True)
            last, t_last = st, now
    finally:
        server.stop()
        if metrics is not None:
            metrics.stop()
            writer.close(timeout=10)
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return 1 if server.error else 0
