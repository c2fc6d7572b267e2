"""The Spark StreamingQueryListener that ships query progress as metrics."""
from spark_listener.listener import SparkMetricsListener
from spark_listener.records import BatchProgress, QueryEnd, QueryStart

__all__ = ["BatchProgress", "QueryEnd", "QueryStart", "SparkMetricsListener"]
