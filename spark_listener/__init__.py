"""The Spark side of the product: the query listener, the monitor that attaches it to any
session, the adapter through which a job adds what Spark does not say of it, and the
latency recorders for a job's own steps.

>>> from spark_listener import monitor
>>> monitor(spark, name="orders-enrichment")     # every streaming query of `spark` from now on
"""
from spark_listener.adapter import JobAdapter
from spark_listener.latency import declared_steps, record_latency, timed_group_step, timed_step
from spark_listener.listener import ListenerOptions, SessionHooks, SparkMetricsListener
from spark_listener.monitor import SparkMonitor, executor_metrics_conf, monitor
from spark_listener.records import BatchProgress, QueryEnd, QueryStart

__all__ = ["BatchProgress", "JobAdapter", "ListenerOptions", "QueryEnd", "QueryStart", "SessionHooks",
           "SparkMetricsListener", "SparkMonitor", "declared_steps", "executor_metrics_conf", "monitor",
           "record_latency", "timed_group_step", "timed_step"]
