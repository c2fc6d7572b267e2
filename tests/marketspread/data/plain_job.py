"""A user's own PySpark job that knows nothing of the monitor: rate -> watermarked count -> noop.

Runs `--seconds`, then writes its query's own progress (Spark's `recentProgress`) as JSON
to `--out`, so a test can hold the monitor's figures against Spark's.
"""
import argparse
import json
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=10)
ap.add_argument("--rate", type=int, default=500)
ap.add_argument("--out", required=True)
ap.add_argument("--checkpoint", required=True)
ap.add_argument("--name", default="plain-rate")
a = ap.parse_args()

spark = (SparkSession.builder.master("local[2]").appName("plain job")
         .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
rows = spark.readStream.format("rate").option("rowsPerSecond", a.rate).load()
counts = rows.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 second")).count()
query = (counts.writeStream.queryName(a.name).outputMode("append").format("noop")
         .option("checkpointLocation", a.checkpoint).trigger(processingTime="500 milliseconds").start())
time.sleep(a.seconds)
query.stop()
with open(a.out, "w") as f:
    json.dump({"id": str(query.id), "app_id": spark.sparkContext.applicationId,
               "progress": [json.loads(p.json) for p in query.recentProgress]}, f)
spark.stop()
