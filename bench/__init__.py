"""The benchmarks: each a script run from the project root as `python -m bench.<name>` (bench/README.md)."""
