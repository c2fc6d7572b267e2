"""`spark-submit` entry point for the `marketspread` commands that run Spark (job, replay).

    spark-submit --master spark://HOST:7077 scripts/submit.py job --state-dir /shared/ms

The master given to spark-submit becomes the job's (`MS_MASTER`) unless `--master` or
`MS_MASTER` says otherwise: the job builds its own session with an explicit master.
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if "MS_MASTER" not in os.environ and "--master" not in sys.argv:
    from pyspark import SparkConf            # under spark-submit: the submitted settings
    master = SparkConf().get("spark.master", None)
    if master:
        os.environ["MS_MASTER"] = master

from marketspread.cli import main  # noqa: E402

raise SystemExit(main())
