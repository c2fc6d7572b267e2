"""What a job knows of itself that Spark's progress does not say: the adapter a job hands `monitor()`.

Any query's figures come from Spark's own progress. A job whose source or state lives
outside Spark can fill the gaps through a `JobAdapter`; every part is optional and the
monitor never asks a job's name what it is. Market Spread's adapter
(marketspread/metrics_wiring.py) gives its source's latest offset (the ingress log's
head), the ingress' muted share, the state its tasks keep themselves and its steps.

>>> monitor(spark, name="orders", adapter=JobAdapter(steps=("parse", "enrich")))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping


@dataclass(frozen=True)
class JobAdapter:
    """A job's own figures for the monitor, each optional.

    `run`: the run tag of every query of the job, for a job that numbers its own runs
    (None: a named query is a run of its name, an unnamed one of the monitor's name).
    `latest_offset()`: the source's latest offset, for a source whose progress reports
    none (Spark's simple stream readers): the query's rows behind are that minus the
    batch's end offset. Called in the progress callback: it must be one cheap read.
    `held_back_share(window_s)`: the share of the last `window_s` seconds the source was
    held back by the job (a muted ingress), or None; the job's backpressured share and its
    status (collector/backpressure.py `query_figures`). Called from the listener's consumer.
    `state_size()`: (rows, bytes) of state the job keeps outside Spark's state store, for
    a query with no state operator; called in the progress callback (throttle it).
    `steps`: the job's steps in order, for its latency pages (default: those the job's
    `record_latency` / `timed_step` declared in this process).
    `run_fields`: more fields of the job's `runs` rows (short text).
    """
    run: str | None = None
    latest_offset: Callable[[], int | None] | None = None
    held_back_share: Callable[[float], float | None] | None = None
    state_size: Callable[[], tuple[int, int] | None] | None = None
    steps: tuple[str, ...] = ()
    run_fields: Mapping[str, str] = field(default_factory=dict)


#: The adapter of a job with nothing to add: Spark's progress says it all.
NO_ADAPTER = JobAdapter()
