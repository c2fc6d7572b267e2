"""Time units. Every timestamp and latency in the project is integer nanoseconds (InfluxDB's
native precision and `time.time_ns()`), so one constant converts to seconds."""

NS = 1_000_000_000          # nanoseconds per second
