"""The Spark StreamingQueryListener that ships query progress as metrics."""
from spark_listener.listener import BatchProgress, QueryEnd, QueryStart, SparkMetricsListener

__all__ = ["BatchProgress", "QueryEnd", "QueryStart", "SparkMetricsListener"]
