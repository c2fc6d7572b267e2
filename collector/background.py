"""Metrics threads give way to the stream: they run at a lower CPU priority.

On a machine whose cores the job keeps busy, a burst of metrics work (decoding a batch's
samples, encoding histograms, sending points) would otherwise take a core from a
micro-batch at the moment it runs and show up in the stream's latency. On Linux every
thread has its own nice value, so only the metrics threads are lowered; they still get
a share of the CPU and catch up when the job leaves some idle, and anything they fall
behind on waits in bounded queues or on disk.

Used in a Spark driver only (Market Spread's shipper, the InfluxDB writer, the alert
evaluator, the query listener's consumer, the executor watch), whose Python threads do no
latency-critical work: the JVM and the Python workers run the batches. Not in the ingress:
there a lowered thread that holds the GIL while it waits for a CPU would hold up the
receive loop (priority inversion through the GIL).
"""
from __future__ import annotations

import os
import threading

NICENESS = 10            # CPU weight ~1/10 of a normal thread's (Linux CFS)


def lower_thread_priority(niceness: int = NICENESS) -> bool:
    """Lower the calling thread's CPU priority by `niceness`; False where that is not possible."""
    try:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + niceness))
        return True
    except (AttributeError, OSError):
        return False
