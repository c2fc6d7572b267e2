"""A user's own PySpark job that ends in one of the ways jobs end; it knows nothing of the monitor.

--mode endless        a rate query until the process is signalled; `finally:` writes the query's
                      own progress (Spark's `recentProgress`) to --out and stops the session
--mode raise          a rate query; after --batches batches the script raises, leaving it running
--mode two-sessions   a rate query in one session, `spark.stop()`, then the same in a new session
Each query writes its progress to --out as {"queries": [{"id", "run_id", "progress"}]}.
"""
import argparse
import json
import time

from pyspark.sql import SparkSession

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=("endless", "raise", "two-sessions"), required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--checkpoint", required=True)
ap.add_argument("--batches", type=int, default=4)
a = ap.parse_args()
queries = []


def session():
    return (SparkSession.builder.master("local[2]").appName("lifecycle job")
            .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())


def start(spark, name):
    q = (spark.readStream.format("rate").option("rowsPerSecond", 100).load().writeStream.queryName(name)
         .format("noop").option("checkpointLocation", f"{a.checkpoint}/{name}")
         .trigger(processingTime="300 milliseconds").start())
    queries.append(q)
    return q


def wait_batches(q, n):
    while len(q.recentProgress) < n:
        time.sleep(0.1)


def save():
    with open(a.out, "w") as f:
        json.dump({"queries": [{"id": str(q.id), "run_id": str(q.runId),
                                "progress": [json.loads(p.json) for p in q.recentProgress]} for q in queries]}, f)


spark = session()
if a.mode == "endless":
    q = start(spark, "endless")
    try:
        wait_batches(q, a.batches)
        print("READY", flush=True)
        q.awaitTermination()
    finally:
        q.stop()
        save()
        spark.stop()
elif a.mode == "raise":
    q = start(spark, "abandoned")
    wait_batches(q, a.batches)
    save()
    raise RuntimeError("the job gave up: quota exceeded")
else:
    q = start(spark, "first-session")
    wait_batches(q, a.batches)
    spark.stop()
    spark = session()
    q = start(spark, "second-session")
    wait_batches(q, a.batches)
    q.stop()
    save()
    spark.stop()
