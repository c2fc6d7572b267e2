"""A plain PySpark script (it never imports the project) that holds its session open.

It prints READY and the kill-links setting Spark got, then waits for a line on stdin, so a
test can look at the sockets its processes listen on.
"""
import sys

from pyspark.sql import SparkSession

builder = SparkSession.builder.master("local[1]").appName("listen-job")
if "--kill-links" in sys.argv:
    builder = builder.config("spark.ui.killEnabled", "true")
spark = builder.getOrCreate()
spark.range(10).count()
print("READY", spark.sparkContext.getConf().get("spark.ui.killEnabled", "unset"), flush=True)
sys.stdin.readline()
spark.stop()
