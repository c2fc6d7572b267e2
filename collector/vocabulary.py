"""The metrics schema's names: measurements, tags, fields, steps and pipelines (docs/METRICS.md).

The one home of every name the written points and the queries share, as
prometheus/client_python's `metrics_core.py` is of its metric types: writers (the
shipper, the listener, the ingress, the bench record, the alert history), the read side
(`collector.query`), the dashboard and the alert rules import them from here, so a name
is typed out once (`tests/test_vocabulary.py` fails on a measurement name spelled out in
a query or a writer elsewhere). Pure constants: importing it costs nothing and loads no
other module.

Example::

    from collector.vocabulary import LATENCY, STEP_E2E, TAG_STEP

    client.query(f'SELECT sum("count") FROM "{LATENCY}" WHERE "{TAG_STEP}" = $step', {"step": STEP_E2E})
"""
from __future__ import annotations

# -- measurements ----------------------------------------------------------------------------
LATENCY = "latency"                         # per-step latency histograms, 1-s and rollup intervals
LATENCY_UNCOUNTED = "latency_uncounted"     # rows a monitored step saw but could not time
INGRESS = "ingress"                         # the ingress' status, once a second
INGRESS_BAD = "ingress_bad"                 # bad frames by reason, once a second
BACKPRESSURE = "backpressure"               # busy / backpressured / idle shares per step
RUNS = "runs"                               # a query run's start and end
SPARK_PROGRESS = "spark_progress"           # one point per micro-batch of a query
SPARK_SOURCE = "spark_source"               # per source and micro-batch
SPARK_STATE = "spark_state"                 # per stateful operator and micro-batch
SPARK_EXECUTOR = "spark_executor"           # the driver's and executors' JVMs (Spark's metrics system)
SPARK_EXECUTORS = "spark_executors"         # the application's executors: active, lost (the driver's poll)
SPARK_TASK_FAILURES = "spark_task_failures"  # failed task attempts per micro-batch (the driver's poll)
ALERT_EVENTS = "alert_events"               # alert rules' state changes
ALERT_NOTIFICATIONS = "alert_notifications"  # webhook attempts
ALERT_LEASE = "alert_lease"                 # evaluators' heartbeats: which one evaluates a namespace
BENCH_RUN = "bench_run"                     # a performance-test run's summary
BENCH_STEP = "bench_step"                   # its steps' merged histograms
BENCH_PROGRESS = "bench_progress"           # its events processed and ingested, per second
PROCESS = "process"                         # its processes' CPU and memory, per second
JOB_RESCALE = "job_rescale"                 # a job's checkpoint re-partitioned to another shard count
MEASUREMENTS = (LATENCY, LATENCY_UNCOUNTED, INGRESS, INGRESS_BAD, BACKPRESSURE, RUNS, SPARK_PROGRESS,
                SPARK_SOURCE, SPARK_STATE, SPARK_EXECUTOR, SPARK_EXECUTORS, SPARK_TASK_FAILURES, ALERT_EVENTS,
                ALERT_NOTIFICATIONS, ALERT_LEASE, BENCH_RUN, BENCH_STEP, BENCH_PROGRESS, PROCESS, JOB_RESCALE)

# -- tags ------------------------------------------------------------------------------------
TAG_RUN = "run"
TAG_PIPELINE = "pipeline"
TAG_STEP = "step"
TAG_WORKER = "worker"
TAG_INTERVAL = "interval"                   # a rollup's length (10s, 1m, 10m, 1h)
TAG_QUERY = "query"
TAG_SOURCE = "source"
TAG_OPERATOR = "operator"
TAG_APP = "app"
TAG_EXECUTOR = "executor"
TAG_REASON = "reason"
TAG_RULE = "rule"
TAG_NAMESPACE = "namespace"
TAG_LABEL = "label"
TAG_PROCESS = "process"
TAG_PHASE = "phase"                         # spark_progress: `startup` on a run's first batch, else absent
PHASE_STARTUP = "startup"
TAG_QUERY_ID = "query_id"                   # Spark's query id: stable across restarts from one checkpoint
TAG_RUN_ID = "run_id"                       # Spark's runId: one per start of a query
LATENCY_TAGS = (TAG_RUN, TAG_PIPELINE, TAG_STEP, TAG_WORKER)

# -- fields of `latency` (and its rollups) ---------------------------------------------------
FIELD_COUNT = "count"
FIELD_HDR = "hdr"
FIELD_MIN = "min"
FIELD_MAX = "max"
FIELD_MEAN = "mean"
#: (field, percentile) written with each interval, Wallaroo's percentiles.
PERCENTILE_FIELDS = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0), ("p999", 99.9), ("p9999", 99.99))

# -- fields of `job_rescale` -----------------------------------------------------------------
FIELD_FROM_SHARDS = "from_shards"
FIELD_TO_SHARDS = "to_shards"
FIELD_BATCH_ID = "batch_id"                 # the last committed batch the state was taken at (-1: none)
FIELD_SYMBOLS = "symbols"
FIELD_SECONDS = "seconds"

# -- steps and pipelines ---------------------------------------------------------------------
STEP_INGRESS = "ingress"
STEP_SOURCE = "source"
STEP_CHECK = "check_market_data"
STEP_SINK = "sink"
STEP_E2E = "start-to-end"
#: Market Spread's steps in their order (its runs write no `steps` field).
MARKET_SPREAD_STEPS = (STEP_INGRESS, STEP_SOURCE, STEP_CHECK, STEP_SINK, STEP_E2E)
#: The `backpressure` step of a whole streaming query.
STEP_JOB = "job"
PIPELINE_NBBO = "nbbo"
PIPELINE_ORDERS = "orders"
PIPELINES = (PIPELINE_NBBO, PIPELINE_ORDERS)
