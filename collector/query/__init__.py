"""The read side: what the dashboard, the alerts and the performance tests read back from InfluxDB.

`store.MetricsStore` reads latency and runs, `panels` the job page's other measurements,
`series` holds the records they return, `bench_runs` the recorded performance-test runs
and `compare_stats` their regressions; `ranges` and `resolution` are the time arithmetic.
Nothing is re-exported here, so a caller needing only `ranges` does not load numpy.
"""
