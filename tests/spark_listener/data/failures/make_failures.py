"""Write the exception texts Spark gives a listener (QueryTerminatedEvent.exception) for real failures.

Run from the checkout: `PYSPARK_PYTHON=.venv/bin/python .venv/bin/python tests/spark_listener/data/failures/make_failures.py`.
Each query fails in one way a user's job does; its text goes to `<name>.txt` beside this
script, the test data of tests/spark_listener/test_failure.py.
"""
import tempfile
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

HERE = Path(__file__).resolve().parent
texts: dict[str, str] = {}


class Catch(StreamingQueryListener):
    def onQueryStarted(self, e): pass
    def onQueryProgress(self, e): pass
    def onQueryIdle(self, e): pass

    def onQueryTerminated(self, e):
        texts[str(e.id)] = e.exception


spark = (SparkSession.builder.master("local[2]").appName("failures").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.streams.addListener(Catch())
work = Path(tempfile.mkdtemp())


def rate():
    return spark.readStream.format("rate").option("rowsPerSecond", 10).load()


def fails_in_batch(df, batch_id):
    if batch_id >= 1:
        raise RuntimeError(f"bad batch {batch_id}: the upstream table is gone")


def bad_column(df, batch_id):
    df.select("no_such_column").count()


def lookup(table, key):
    return table[key]


def chained(df, batch_id):
    try:
        lookup({}, "EUR")
    except KeyError as e:
        raise ValueError("no rate for currency EUR") from e


@F.udf("long")
def tariff(v):
    if v > 3:
        raise ValueError(f"value {v} is out of range for the tariff")
    return v


def enrich(frames):
    for pdf in frames:
        if len(pdf) and pdf["value"].max() > 3:
            raise KeyError("missing_column_in_lookup")
        yield pdf


QUERIES = {
    "foreach_batch": lambda: rate().writeStream.foreachBatch(fails_in_batch),
    "foreach_batch_chained": lambda: rate().writeStream.foreachBatch(chained),
    "udf": lambda: rate().select(tariff("value").alias("v")).writeStream.format("noop"),
    "map_in_pandas": lambda: rate().mapInPandas(enrich, "timestamp timestamp, value long").writeStream.format("noop"),
    "driver_bad_column": lambda: rate().writeStream.foreachBatch(bad_column),
    "jvm_divide_by_zero": lambda: rate().selectExpr("1 / (value - value) AS x").writeStream.format("noop"),
}

spark.conf.set("spark.sql.ansi.enabled", "true")
for name, build in QUERIES.items():
    q = build().queryName(name).option("checkpointLocation", str(work / name)).start()
    try:
        q.awaitTermination(120)
    except Exception:
        pass
    deadline = time.monotonic() + 10
    while str(q.id) not in texts and time.monotonic() < deadline:
        time.sleep(0.1)
    (HERE / f"{name}.txt").write_text(texts[str(q.id)])
spark.stop()
