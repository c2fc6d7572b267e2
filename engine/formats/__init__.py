"""The engine's on-disk formats: one module per format, which both writes and reads it.

- `log`: the ingress log (64-byte records in segments; `head`, `consumed`, `hold`).
- `records`: the fields of a log record, read in place (numpy), and the symbol -> shard map.
- `shard_files`: the shard files, a per-shard copy of the log (seq + record, 72 bytes).
- `result_frames`: OrderResult frames as numpy rows (what a shard's `.bin` holds).
- `batch`: a batch folder (`<shard>.bin`, its `.seq` sidecar of keys and latency figures),
  visible once Spark commits the batch; `retained-from`.
- `stamps`: a shard's latency stamps of a batch (`BatchStamps`), and the samples made of them.

Only `engine.wire` (the fixish frames the records carry) and `engine.storage` (disk space,
safe deletion, retention's records) lie below.
"""
